fsdpconv full-to-dcp --mesh shard=1024,tp=2048 --dry-run "$FIXTURES/full/tiny_vitlm.pt"
