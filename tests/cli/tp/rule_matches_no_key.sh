# A tp rule that matches no key is an error naming the rule, not a silently replicated tensor:
# here the user wrote the torchtitan key layout for a model whose keys are blocks.N.attn...
fsdpconv full-to-dcp --mesh shard=2,tp=2 --tp '^blocks\.\d+\.attn\.qkv\.weight$=0' \
    --tp '^layers\.\d+\.attention\.w[qkv]\.(weight|bias)$=0' -o out "$FIXTURES/full/tiny_vitlm.pt"
rc=$?
[ ! -e out ] && [ -z "$(ls -A)" ] || exit 99
exit $rc
