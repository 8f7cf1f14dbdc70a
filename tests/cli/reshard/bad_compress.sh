fsdpconv reshard --world-size 2 --compress lz4 -o out "$FIXTURES/dcp/model_ws2"
