# --tp takes up to 256 rules.  256 are all taken (qkv is sharded 2 x 2: 4
# chunks); 257 are one over the cap: exit 2 with the one message and nothing
# written, in full-to-dcp and reshard (the 257th rule was once left out with a
# message while the run went on and exited 0).  Every rule matches keys, so
# the first 256 make a valid job.
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
    -o at_cap "$FIXTURES/full/tiny_vitlm.pt"
echo "256 rules: exit $?"
fsdpconv inspect at_cap | grep -A2 '^blocks.1.attn.qkv.weight '
# shellcheck disable=SC2046
fsdpconv full-to-dcp --mesh shard=2,tp=2 $(tp_rules 257 'blocks\.\d+\.attn\.qkv' 0) \
    -o out "$FIXTURES/full/tiny_vitlm.pt"
echo "full-to-dcp, 257 rules: exit $?"
# shellcheck disable=SC2046
fsdpconv reshard --mesh shard=1,tp=2 $(tp_rules 257 'model\.proj' replicate) \
    -o out2 "$FIXTURES/dcp/model_ws2"
echo "reshard, 257 rules: exit $?"
ls
