: > out.safetensors
fsdpconv dcp-to-full -o out.safetensors "$FIXTURES/dcp/model_ws2"
