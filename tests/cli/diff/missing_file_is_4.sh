fsdpconv diff "$FIXTURES/full/tiny_vitlm.pt" nope.pt
