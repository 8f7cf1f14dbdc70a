cd "$FIXTURES/.."
fsdpconv inspect --checksum fixtures/full/torch113_tiny_vitlm.pt
