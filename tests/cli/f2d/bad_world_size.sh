fsdpconv full-to-dcp --world-size 0 -o out "$FIXTURES/full/tiny_vitlm.pt"
