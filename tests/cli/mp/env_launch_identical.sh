# A torchrun/srun-style launch: every rank runs the same command with RANK,
# WORLD_SIZE, MASTER_ADDR, MASTER_PORT; the result equals a single process.
in="$FIXTURES/full/tiny_vitlm.pt"
fsdpconv full-to-dcp --world-size 4 --conv2d-to-linear patch_embed.weight -o out "$in" && mv out one
export WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$((20000 + $$ % 20000))
RANK=1 fsdpconv full-to-dcp --world-size 4 --conv2d-to-linear patch_embed.weight -o out "$in" &
p1=$!
RANK=2 fsdpconv full-to-dcp --world-size 4 --conv2d-to-linear patch_embed.weight -o out "$in" &
p2=$!
RANK=0 fsdpconv full-to-dcp --world-size 4 --conv2d-to-linear patch_embed.weight -o out "$in"
r0=$?
wait $p1; r1=$?
wait $p2; r2=$?
echo "exit: $r0 $r1 $r2"
for f in one/.metadata one/*.distcp; do cmp "$f" "out/${f#one/}" || exit 1; done
echo identical
