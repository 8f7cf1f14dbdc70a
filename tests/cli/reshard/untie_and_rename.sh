# A tied DCP untied and renamed while resharding, then exported with a grown vocabulary.
fsdpconv full-to-dcp --world-size 2 -o tied --tie lm_head.weight=embed_tokens.weight \
    "$FIXTURES/full/tiny_vitlm.pt" >/dev/null
fsdpconv reshard --world-size 3 -o untied --drop '^lm_head\.weight$' \
    --copy '^embed_tokens\.weight$=lm_head.weight' --rename '^blocks\.(\d+)\.=layers.\1.' tied >/dev/null
fsdpconv inspect --checksum --key '^(lm_head|embed_tokens)\.weight$|^layers\.1\.norm1\.bias$' untied | grep sha256
fsdpconv dcp-to-full -o grown.safetensors --resize-rows lm_head.weight=13:zero --strip-wrappers untied >/dev/null
fsdpconv inspect --key '^(lm_head|embed_tokens)\.weight$' grown.safetensors
