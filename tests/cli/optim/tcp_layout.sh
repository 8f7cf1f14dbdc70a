# AdamW state of a training checkpoint -> torch_checkpointing's default layout: item
# "optimizer" beside "model", optimizer_<rank>.pt holding what the DCP was saved from
# (the flat dict torchtitan saves: state.<fqn>.<name>, param_groups.<fqn>.<name>); read back
fsdpconv full-to-dcp --format torch-checkpointing --world-size 2 --select model \
    --optim-select optimizer --optim-skip '^vit_pos_embed$' --optim-skip '^temperature$' \
    -q -o out "$FIXTURES/full/tiny_vitlm_train.pt"
ls out
fsdpconv inspect --verify --key '^(model\.norm\.weight|optimizer\.state\.norm\.weight\..*)$' out
# the same state through a DCP: reshard to torch_checkpointing on another mesh, then back
fsdpconv full-to-dcp --world-size 2 --select model --optim-select optimizer \
    --optim-skip '^vit_pos_embed$' --optim-skip '^temperature$' -q -o dcp \
    "$FIXTURES/full/tiny_vitlm_train.pt"
fsdpconv reshard --format torch-checkpointing --mesh replicate=2,shard=2 -q -o tcp4 dcp
fsdpconv diff --key '^(model|optimizer\.state)\.' dcp tcp4 && echo "tensors equal"
fsdpconv diff --key '^(model|optimizer\.state)\.' out tcp4 && echo "tensors equal"
# and back to a DCP: tensors and param_groups values (read from the rank files) equal the start
fsdpconv reshard --world-size 3 -q -o back tcp4
fsdpconv diff dcp back && echo "all equal"
fsdpconv inspect --key '^optimizer\.param_groups\.norm\.weight\.(lr|betas)$' back | sed -n '/^VALUES/,$p'
