fsdpconv full-to-dcp --metadata local --world-size 2 -o out "$FIXTURES/full/tiny_vitlm.pt"
