# 256 --tp rules, the cap, are all taken: the job runs with every one of them.
tp_rules() {
    i=0
    while [ $i -lt "$1" ]; do
        printf -- '--tp\n(%s|layers\\.%d\\.\\w+)\\.weight$=%s\n' "$2" $i "$3"
        i=$((i + 1))
    done
}
IFS='
'
# shellcheck disable=SC2046
fsdpconv -q full-to-dcp --mesh shard=2,tp=2 $(tp_rules 256 'blocks\.\d+\.attn\.qkv' 0) \
    -o out "$FIXTURES/full/tiny_vitlm.pt"
echo "exit $?"
fsdpconv inspect out | grep -A2 '^blocks.1.attn.qkv.weight '
