# the torchtitan-style placements: colwise qkv (_StridedShard), rowwise fc2 (2-D boxes),
# tp-replicated norm (stored once per dp box), empty boxes keep the tp offset
fsdpconv full-to-dcp --mesh shard=2,tp=2 --tp 'qkv\.(weight|bias)$=0' --tp 'fc2\.weight$=1' \
    --dry-run "$FIXTURES/full/tiny_vitlm.pt" >plan.txt || exit 1
head -n 1 plan.txt
grep -A4 -E '^tensor (blocks\.0\.attn\.qkv\.weight|blocks\.0\.mlp\.fc2\.weight|norm\.weight|logit_scale) ' plan.txt
