fsdpconv full-to-dcp --world-size 2 -o no/such/dir/out "$FIXTURES/full/tiny_vitlm.pt"
