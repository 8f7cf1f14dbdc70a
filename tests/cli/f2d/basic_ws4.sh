cd "$FIXTURES/.."
out=$OLDPWD/out
fsdpconv full-to-dcp --world-size 4 --conv2d-to-linear patch_embed.weight \
    --tie lm_head.weight=embed_tokens.weight --dtype bf16 -o "$out" fixtures/full/tiny_vitlm.pt
ls -A "$out"
cd "$OLDPWD" && fsdpconv inspect --checksum --verify --key '^(patch_embed\.weight|lm_head\.weight|embed_tokens\.weight|modality_embed|temperature)$' out
