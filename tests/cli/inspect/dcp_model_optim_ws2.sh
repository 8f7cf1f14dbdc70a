cd "$FIXTURES/.."
fsdpconv inspect --checksum --verify fixtures/dcp/model_optim_ws2
