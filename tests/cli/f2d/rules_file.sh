cat > rules.txt <<'R'
# BAGEL-style post-init edits
select model            # the nested checkpoint's model
conv2d-to-linear patch_embed.weight
tie lm_head.weight=embed_tokens.weight
rename ^blocks\.([0-9]+)\.=layers.\1.
dtype float16
R
fsdpconv full-to-dcp --rules rules.txt --add-prefix model. --world-size 3 -o out "$FIXTURES/full/tiny_vitlm_train.pt"
fsdpconv inspect --key '^model\.(layers\.1\.attn\.qkv\.weight|patch_embed\.weight)$' out
