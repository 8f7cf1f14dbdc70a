# Optimizer state keyed by parameter names does not follow a stack yet.
cp "$FIXTURES/../tests/cli/layout/moe_train_fqn.pt" . && \
    fsdpconv full-to-dcp --world-size 2 --select model --optim-select optimizer -o out \
    --stack '^(.*)\.block_sparse_moe\.experts\.(\d+)\.(w[13])\.weight$=\1.mlp.experts.\3' \
    moe_train_fqn.pt
rc=$?
test ! -e out || echo "out was written"
exit $rc
