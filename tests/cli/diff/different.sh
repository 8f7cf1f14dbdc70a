fsdpconv full-to-dcp --world-size 2 --dtype bf16 --conv2d-to-linear patch_embed.weight --drop '^extra\.' -o d "$FIXTURES/full/tiny_vitlm.pt"
fsdpconv diff --key '^(patch_embed|extra\.qkv_bf16|blocks\.0\.attn\.qkv\.weight|step_count)' "$FIXTURES/full/tiny_vitlm.pt" d
