cd "$FIXTURES/.."
fsdpconv inspect fixtures/safetensors/sharded
