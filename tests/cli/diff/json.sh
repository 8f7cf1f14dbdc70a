cd "$FIXTURES/.."
fsdpconv diff --json --key '^lm_head' fixtures/full/tiny_vitlm.pt fixtures/full/torch113_tiny_vitlm.pt
