cd "$FIXTURES/.."
fsdpconv inspect fixtures/full/torch113_train.pt
