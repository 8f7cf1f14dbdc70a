# --optim FILE on a nested training checkpoint: suggest --optim-select KEY and
# list the top-level keys to choose from.
fsdpconv full-to-dcp --world-size 2 --select model --optim "$FIXTURES/full/tiny_vitlm_train.pt" \
    -o out "$FIXTURES/full/tiny_vitlm_train.pt"
