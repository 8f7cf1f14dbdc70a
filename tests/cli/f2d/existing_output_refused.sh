fsdpconv full-to-dcp -q --world-size 2 -o out "$FIXTURES/full/tiny_vitlm.pt"
fsdpconv full-to-dcp --world-size 2 -o out "$FIXTURES/full/tiny_vitlm.pt"
