# A fused QKV projection (Megatron, GPT-NeoX, this fixture's ViT) cut into q, k, v and fused
# again: the round trip gives the input's bytes; a dry run shows the three [8, 8] tensors.
fsdpconv full-to-dcp --world-size 3 -o split --dry-run \
    --split '^(blocks\.0\.attn)\.qkv\.weight$=\1.q.weight,\1.k.weight,\1.v.weight:0' \
    "$FIXTURES/safetensors/tiny_vitlm.safetensors" | grep -A1 '^tensor blocks\.0\.attn\.[qkv]\.weight'
fsdpconv full-to-dcp --world-size 3 -o split \
    --split '^(blocks\.\d+\.attn)\.qkv\.weight$=\1.q.weight,\1.k.weight,\1.v.weight:0' \
    "$FIXTURES/safetensors/tiny_vitlm.safetensors" 2>/dev/null
fsdpconv dcp-to-full -o fused.safetensors \
    --concat '^(.*)\.q\.weight$,\1.k.weight,\1.v.weight=\1.qkv.weight:0' split 2>/dev/null
fsdpconv diff "$FIXTURES/safetensors/tiny_vitlm.safetensors" fused.safetensors
