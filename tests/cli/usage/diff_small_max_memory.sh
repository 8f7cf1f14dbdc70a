# a refused value says why
fsdpconv diff --max-memory 1K "$FIXTURES/full/tiny_vitlm.pt" "$FIXTURES/full/tiny_vitlm.pt"
