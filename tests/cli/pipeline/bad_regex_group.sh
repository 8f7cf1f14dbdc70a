fsdpconv full-to-dcp --world-size 2 -o out --rename '^(norm)\.=\g<nope>.' "$FIXTURES/full/tiny_vitlm.pt"
