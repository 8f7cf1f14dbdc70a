cd "$FIXTURES/.."
fsdpconv full-to-dcp --dry-run --mesh replicate=2,shard=3 --drop '^(blocks|extra)\.' fixtures/full/tiny_vitlm.pt
