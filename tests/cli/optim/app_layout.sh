# AdamW state of a training checkpoint (integer ids) -> the DCP tutorial's AppState layout.
fsdpconv full-to-dcp --world-size 3 --select model --optim-select optimizer \
    --optim-skip '^vit_pos_embed$' --optim-skip '^temperature$' \
    --conv2d-to-linear patch_embed.weight --layout app -o out "$FIXTURES/full/tiny_vitlm_train.pt"
fsdpconv inspect --key '^app\.(model\.patch_embed\.weight|optim\.state\.patch_embed\.weight\..*|optim\.param_groups\.0\.(lr|params))$' out
