fsdpconv inspect --key '(' "$FIXTURES/full/tiny_vitlm.pt"
