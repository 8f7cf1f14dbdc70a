fsdpconv full-to-dcp --mesh shard=2,tp=2 --tp 'weight$=two' --dry-run "$FIXTURES/full/tiny_vitlm.pt"
