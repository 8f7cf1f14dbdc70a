fsdpconv diff "$FIXTURES/full/tiny_vitlm.pt" "$FIXTURES/bad/deflate.pt"
