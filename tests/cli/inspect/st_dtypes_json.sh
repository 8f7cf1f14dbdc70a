cd "$FIXTURES/.."
fsdpconv inspect --json --checksum fixtures/safetensors/dtypes.safetensors
