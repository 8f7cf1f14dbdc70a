# --tp and --tp-plan take the regexes every key option takes (PCRE2, Python's re): \d, (?:...),
# alternation and groups.  Written so, they give the plan the plain rules give, and they shard
# (the grep shows the placements: a rule that silently matched nothing would show Replicate()).
in="$FIXTURES/full/tiny_vitlm.pt"
fsdpconv full-to-dcp --mesh shard=2,tp=2 --tp 'qkv\.(weight|bias)$=0' --tp 'fc2\.weight$=1' \
    --dry-run "$in" >plain.txt || exit 1
printf '# blocks of any depth\n^blocks\\.\\d+\\.mlp\\.fc(?:2)\\.weight$   1\n' >plan.tp
fsdpconv full-to-dcp --mesh shard=2,tp=2 --tp '^blocks\.\d+\.attn\.qkv\.(?:weight|bias)$=0' \
    --tp-plan plan.tp --dry-run "$in" >pcre.txt || exit 1
cmp plain.txt pcre.txt || exit 1
grep -E '^tensor blocks\.[01]\.(attn\.qkv|mlp\.fc2)\.(weight|bias) ' pcre.txt | sed 's/  */ /g'
