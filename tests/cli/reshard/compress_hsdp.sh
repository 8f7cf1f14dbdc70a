fsdpconv full-to-dcp --world-size 4 -o a "$FIXTURES/full/tiny_vitlm_train.pt"
fsdpconv reshard --mesh replicate=2,shard=3 --compress zstd:5 -o b a
fsdpconv inspect --verify b | tail -n 3
fsdpconv diff "$FIXTURES/full/tiny_vitlm_train.pt" b
