# full -> safetensors (4 ranks, bf16) -> safetensors (3 ranks) -> DCP (2 ranks) -> full, and
# safetensors (3 ranks) -> full: all equal
in="$FIXTURES/full/tiny_vitlm.pt"
fsdpconv full-to-dcp --format safetensors --world-size 4 --dtype bfloat16 --drop '^extra\.' -o st4 "$in"
fsdpconv reshard --format safetensors --world-size 3 -o st3 st4
fsdpconv reshard --world-size 2 -o dcp2 st3
fsdpconv dcp-to-full -o full.safetensors dcp2
fsdpconv dcp-to-full -o direct.pt st3
ls st4 st3
fsdpconv inspect st3 | head -1
fsdpconv diff st3 st4 && echo "st3 == st4"
fsdpconv diff full.safetensors st4 && echo "exported == st4"
fsdpconv diff direct.pt full.safetensors && echo "direct export == exported"
fsdpconv reshard --world-size 2 -o nope "$in" 2>&1 | sed "s|$FIXTURES|FIXTURES|"; ls
