cd "$FIXTURES/.."
fsdpconv full-to-dcp --format safetensors --dry-run --world-size 3 --drop '^(blocks|extra|connector|embed|norm|lm)' fixtures/full/tiny_vitlm.pt
