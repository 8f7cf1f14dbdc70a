cd "$FIXTURES/.."
fsdpconv inspect --checksum fixtures/full/tiny_vitlm.pt
