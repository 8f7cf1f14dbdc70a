fsdpconv full-to-dcp --world-size 2 --mesh replicate=1,shard=2 -o out "$FIXTURES/full/tiny_vitlm.pt"
