fsdpconv full-to-dcp --format zip --world-size 2 -o out "$FIXTURES/full/tiny_vitlm.pt"
