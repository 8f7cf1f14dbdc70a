# Experts of one stack in two param groups cannot be one parameter.
cp "$FIXTURES/../tests/cli/layout/moe_train_groups.pt" . && \
    fsdpconv full-to-dcp --world-size 2 --select model --optim-select optimizer -o out \
    --stack '^(.*)\.block_sparse_moe\.experts\.(\d+)\.(w[13])\.weight$=\1.mlp.experts.\3' \
    moe_train_groups.pt
rc=$?
test ! -e out || echo "out was written"
exit $rc
