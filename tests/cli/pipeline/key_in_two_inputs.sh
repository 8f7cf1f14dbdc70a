fsdpconv full-to-dcp --world-size 2 -o out "$FIXTURES/full/tiny_vitlm.pt" "$FIXTURES/safetensors/tiny_vitlm.safetensors"
