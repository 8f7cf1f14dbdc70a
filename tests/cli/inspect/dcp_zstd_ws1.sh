cd "$FIXTURES/.."
fsdpconv inspect fixtures/dcp/zstd_ws1
