# AdamW state of a training checkpoint -> torch_checkpointing's default layout: item
# "optimizer" beside "model", optimizer_<rank>.pt holding optimizer_transform_pre()'s form
# (state keyed by FQN, param_groups with param_names); read back as optimizer.<path> keys
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
