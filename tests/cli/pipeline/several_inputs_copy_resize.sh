# Two inputs under prefixes, MoT copies, a grown vocabulary; inspect the result.
fsdpconv full-to-dcp --world-size 3 -o out \
    --copy '^llm\.(blocks\.\d+)\.attn\.(?P<w>qkv|proj)\.(weight|bias)$=llm.\1.attn.\g<w>_moe_gen.\3' \
    --resize-rows llm.embed_tokens.weight=16:zero --dtype bf16 \
    llm.="$FIXTURES/full/tiny_vitlm.pt" vit.="$FIXTURES/safetensors/tiny_vitlm.safetensors"
fsdpconv inspect --checksum --key '^llm\.(embed_tokens\.weight|blocks\.1\.attn\.qkv(_moe_gen)?\.weight)$' out
