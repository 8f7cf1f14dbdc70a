fsdpconv full-to-dcp --mesh shard=2,tp=2 --tp 'weight$=0' --tp 'patch_embed\.weight$=replicate' --dry-run "$FIXTURES/full/tiny_vitlm.pt"
