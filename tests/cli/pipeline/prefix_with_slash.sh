fsdpconv full-to-dcp --world-size 2 -o out a/b="$FIXTURES/full/tiny_vitlm.pt"
