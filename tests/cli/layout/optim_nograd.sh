# An expert that never got a gradient has no AdamW state: its stack has nothing to take.
cp "$FIXTURES/../tests/cli/layout/moe_train_nograd.pt" . && \
    fsdpconv full-to-dcp --world-size 2 --select model --optim-select optimizer -o out \
    --stack '^(.*)\.block_sparse_moe\.experts\.(\d+)\.(w[13])\.weight$=\1.mlp.experts.\3' \
    moe_train_nograd.pt
rc=$?
test ! -e out || echo "out was written"
exit $rc
