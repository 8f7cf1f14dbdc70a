cd "$FIXTURES/.."
fsdpconv inspect --key "^blocks\.1\." --checksum fixtures/safetensors/sharded/model.safetensors.index.json
