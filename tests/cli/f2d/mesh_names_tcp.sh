# the mesh recorded in metadata.pkl: torchtitan's names and cuda by default, or the user's
in="$FIXTURES/full/tiny_vitlm.pt"
fsdpconv full-to-dcp --format torch-checkpointing --mesh replicate=2,shard=2 --drop '^extra\.' -o a "$in" >/dev/null 2>&1
fsdpconv full-to-dcp --format torch-checkpointing --mesh replicate=2,shard=2 --drop '^extra\.' \
    --mesh-device cpu --mesh-dim-names rep,shard -o b "$in" >/dev/null 2>&1
for d in a b; do
    grep -c dp_replicate "$d/metadata.pkl" >/dev/null && echo "$d: torchtitan names" || echo "$d: other names"
    grep -q cuda "$d/metadata.pkl" && echo "$d: cuda" || echo "$d: not cuda"
done
fsdpconv diff a b >/dev/null && echo "same tensors"
fsdpconv full-to-dcp --format torch-checkpointing --world-size 2 --mesh-dim-names a,b -o c "$in" 2>&1
fsdpconv full-to-dcp --world-size 2 --mesh-device cpu -o c "$in" 2>&1
ls
