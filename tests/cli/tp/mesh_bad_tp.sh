fsdpconv full-to-dcp --mesh shard=2,tp=0 --dry-run "$FIXTURES/full/tiny_vitlm.pt" 2>err
rc=$?
head -n 1 err >&2
exit $rc
