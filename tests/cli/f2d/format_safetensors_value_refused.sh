fsdpconv full-to-dcp --format safetensors --world-size 2 -o out "$FIXTURES/full/values.pt"
