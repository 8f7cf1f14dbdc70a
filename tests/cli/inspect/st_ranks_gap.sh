# A rank's file missing from a per-rank safetensors directory: the coverage check lists the gaps
# (the last rank's file missing would shrink the inferred shapes instead, as torch's reader does).
fsdpconv -q full-to-dcp --world-size 3 --format safetensors -o st "$FIXTURES/full/tiny_vitlm.pt" &&
    rm st/shard-00002-model-00001-of-00001.safetensors || exit 1
fsdpconv inspect --key '^(embed_tokens\.weight|step_count)$' st >out
rc=$?
sed -n '1,/^coverage:/p' out
grep "^chunks of 'embed_tokens.weight'" out
exit $rc
