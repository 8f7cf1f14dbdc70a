# AdamW state takes its parameter's placement (the rules name model keys; the optimizer's
# keys are matched through their parameter), 0-d steps stay whole
fsdpconv full-to-dcp --mesh shard=2,tp=2 --tp 'qkv\.weight$=0' --tp 'fc2\.weight$=1' \
    --select model --optim-select optimizer --optim-skip '^vit_pos_embed$' \
    --optim-skip '^temperature$' --dry-run "$FIXTURES/full/tiny_vitlm_train.pt" >plan.txt || exit 1
grep -E '^tensor (model|optimizer\.state)\.blocks\.0\.(attn\.qkv|mlp\.fc2|norm1)\.weight' plan.txt
