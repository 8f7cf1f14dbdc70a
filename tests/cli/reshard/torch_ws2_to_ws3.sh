# A checkpoint PyTorch wrote at 2 ranks (model + AdamW state), re-cut for 3.
fsdpconv reshard --world-size 3 -o out "$FIXTURES/dcp/model_optim_ws2"
fsdpconv inspect --verify --key '^(model\.emb\.weight|optim\.state\.emb\.weight\.step|optim\.param_groups\.0\.betas)$' out
fsdpconv diff "$FIXTURES/dcp/model_optim_ws2" out
