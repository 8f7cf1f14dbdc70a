cd "$FIXTURES/.."
fsdpconv inspect fixtures/full/tiny_vitlm.pt
