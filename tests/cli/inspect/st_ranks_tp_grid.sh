# FSDP x TP per-rank safetensors: the grid names each box's rank (shard-{rank+1}-model-...).
fsdpconv full-to-dcp --mesh shard=2,tp=2 --tp 'qkv\.weight$=1' --format safetensors -o st \
    "$FIXTURES/full/tiny_vitlm.pt" &&
    fsdpconv inspect --verify --key '^blocks\.0\.attn\.qkv\.weight$' st
