# Compressed input stays compressed by default; --decompress writes plain items.
fsdpconv reshard --world-size 2 -o kept "$FIXTURES/dcp/zstd_ws1"
fsdpconv reshard --world-size 2 --decompress -o plain "$FIXTURES/dcp/zstd_ws1"
fsdpconv inspect --json kept | grep -c '"transform": "stream.zstd/1"'
fsdpconv inspect --json plain | grep -c '"transform"'
fsdpconv diff kept plain
fsdpconv diff "$FIXTURES/dcp/zstd_ws1" plain
