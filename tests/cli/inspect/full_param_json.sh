cd "$FIXTURES/.."
fsdpconv inspect --json fixtures/full/tiny_vitlm_param.pt
