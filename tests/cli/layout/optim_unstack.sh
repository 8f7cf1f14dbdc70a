# And back: the stacked training checkpoint with --split/--unstack to the per-expert layout
# (3 ranks, --max-memory below one expert) equals the per-expert one converted as it is.
d=$FIXTURES/../tests/cli/layout
fsdpconv full-to-dcp -q --world-size 3 --max-memory 4K --select model --optim-select optimizer \
    -o got \
    --split '^(.*)\.mlp\.experts\.gate_up_proj$=\1.mlp.experts.w1,\1.mlp.experts.w3:1' \
    --unstack '^(.*)\.mlp\.experts\.(w[13])$=\1.block_sparse_moe.experts.{}.\2.weight' \
    --unstack '^(.*)\.mlp\.experts\.down_proj$=\1.block_sparse_moe.experts.{}.w2.weight' \
    --rename '^(.*)\.mlp\.gate\.weight$=\1.block_sparse_moe.gate.weight' \
    "$d/moe_train_stacked.pt" || exit 1
fsdpconv full-to-dcp -q --world-size 3 --select model --optim-select optimizer -o want \
    "$d/moe_train.pt" || exit 1
fsdpconv diff got want
