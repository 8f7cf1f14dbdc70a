cd "$FIXTURES/.."
fsdpconv inspect --json --checksum fixtures/full/dtypes.pt
