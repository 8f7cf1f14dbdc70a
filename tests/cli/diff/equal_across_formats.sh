# The single-file safetensors also holds extra.* tensors the sharded one lacks.
fsdpconv diff --key '^(blocks|patch|embed|lm_head|norm|connector)' "$FIXTURES/safetensors/tiny_vitlm.safetensors" "$FIXTURES/safetensors/sharded"
