# AdamW state follows --stack/--concat/--rename of its parameters: a per-expert training
# checkpoint converted with transformers 5's Mixtral rules (4 ranks, --max-memory below one
# expert) equals the conversion of the training state torch built for the stacked model
# (moe_optim_gen.py): parameters, exp_avg and exp_avg_sq stacked alike, step and param_groups
# as get_state_dict gives them; in both layouts.
d=$FIXTURES/../tests/cli/layout
for layout in torchtitan app; do
    fsdpconv full-to-dcp -q --world-size 4 --max-memory 4K --layout $layout --select model \
        --optim-select optimizer -o got-$layout \
        --stack '^(.*)\.block_sparse_moe\.experts\.(\d+)\.(w[13])\.weight$=\1.mlp.experts.\3' \
        --concat '^(.*)\.mlp\.experts\.w1$,\1.mlp.experts.w3=\1.mlp.experts.gate_up_proj:1' \
        --stack '^(.*)\.block_sparse_moe\.experts\.(\d+)\.w2\.weight$=\1.mlp.experts.down_proj' \
        --rename '^(.*)\.block_sparse_moe\.gate\.weight$=\1.mlp.gate.weight' "$d/moe_train.pt" || exit 1
    fsdpconv full-to-dcp -q --world-size 4 --layout $layout --select model \
        --optim-select optimizer -o want-$layout "$d/moe_train_stacked.pt" || exit 1
    fsdpconv diff got-$layout want-$layout || exit 1
done
fsdpconv inspect --key 'state\.layers\.0\.mlp\.experts\.gate_up_proj' got-torchtitan |
    grep -E '^optimizer|offsets' | sed 's/  __.*//'
