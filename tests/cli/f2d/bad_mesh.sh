fsdpconv full-to-dcp --mesh replicate=2,tensor=2 -o out "$FIXTURES/full/tiny_vitlm.pt"
