cd "$FIXTURES/.."
fsdpconv inspect --checksum --verify fixtures/dcp/model_ws2
