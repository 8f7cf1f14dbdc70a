fsdpconv full-to-dcp --world-size 2 --dtype int8 -o out "$FIXTURES/full/tiny_vitlm.pt"
