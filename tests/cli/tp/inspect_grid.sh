# inspect shows which rank's file holds each box of a key cut on rows and columns
fsdpconv full-to-dcp --mesh shard=2,tp=2 --tp 'fc2\.weight$=1' -o out "$FIXTURES/full/tiny_vitlm.pt" || exit 1
fsdpconv inspect --key 'blocks\.0\.mlp\.fc2\.weight$' out
