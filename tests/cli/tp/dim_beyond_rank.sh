fsdpconv full-to-dcp --mesh shard=2,tp=2 --tp 'patch_embed\.bias$=1' --dry-run "$FIXTURES/full/tiny_vitlm.pt"
