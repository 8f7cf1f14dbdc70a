fsdpconv reshard -x "$FIXTURES/dcp/model_ws2"
