# full -> torch-checkpointing (4 ranks, bf16, the default .pt layout) -> torch-checkpointing
# (HSDP 2x3, safetensors layout) -> DCP (2 ranks) -> full, and torch-checkpointing -> full
# directly: all equal; every rank file holds its shards
in="$FIXTURES/full/tiny_vitlm.pt"
fsdpconv full-to-dcp --format torch-checkpointing --world-size 4 --dtype bfloat16 --drop '^extra\.' -o t4 "$in"
fsdpconv reshard --format torch-checkpointing --tcp-layout safetensors --mesh replicate=2,shard=3 -o t6 t4
fsdpconv reshard --world-size 2 -o dcp2 t6
fsdpconv dcp-to-full -o full.safetensors dcp2
fsdpconv dcp-to-full -o direct.pt t6
ls t4 t6
fsdpconv inspect --verify t6 | head -1
fsdpconv inspect --verify t4 | head -1
fsdpconv diff t6 t4 && echo "t6 == t4"
fsdpconv diff full.safetensors t4 && echo "exported == t4"
fsdpconv diff direct.pt full.safetensors && echo "direct export == exported"
