fsdpconv dcp-to-full "$FIXTURES/dcp/model_ws2" -o
