cd "$FIXTURES/.."
fsdpconv inspect fixtures/full/values.pt
