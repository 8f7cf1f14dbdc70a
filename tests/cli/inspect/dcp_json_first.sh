cd "$FIXTURES/.."
fsdpconv inspect --json fixtures/dcp/model_optim_ws2
