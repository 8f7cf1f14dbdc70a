fsdpconv full-to-dcp --world-size 2 --select model --optim-select optimizer \
    --optim-skip '^vit_pos_embed$' --optim-skip '^temperature$' -o out "$FIXTURES/full/tiny_vitlm_train.pt"
fsdpconv inspect --key '^(model\.norm\.weight|optimizer\.state\.norm\.weight\..*|optimizer\.param_groups\.norm\.weight\.(lr|betas))$' out
