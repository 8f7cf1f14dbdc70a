cd "$FIXTURES/.."
fsdpconv inspect --checksum fixtures/safetensors/tiny_vitlm.safetensors
