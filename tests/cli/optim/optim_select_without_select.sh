# --optim-select inside the input without --select model: the optimizer's own
# tensors would be model keys; the message names --select, not frozen parameters.
fsdpconv full-to-dcp --world-size 2 --optim-select optimizer -o out "$FIXTURES/full/tiny_vitlm_train.pt"
