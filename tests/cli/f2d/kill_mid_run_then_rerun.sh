# A conversion killed with SIGKILL mid-run leaves no OUT (at most a partial
# directory), and the next run removes the leftover and succeeds.
n=268435456   # 256 MiB of float32 zeros, written in 4 KiB slabs so the run takes a while
hdr='{"w":{"dtype":"F32","shape":[1024,65536],"data_offsets":[0,268435456]}}'
len=$(printf '%s' "$hdr" | wc -c)
printf "\\$(printf %03o $len)\\000\\000\\000\\000\\000\\000\\000" > big.safetensors
printf '%s' "$hdr" >> big.safetensors
head -c $n /dev/zero >> big.safetensors
fsdpconv full-to-dcp --world-size 4 --threads 1 --max-memory 4KiB -o out big.safetensors &
pid=$!
i=0
while [ -z "$(ls -d out.partial-* 2>/dev/null)" ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i + 1)); done
kill -9 $pid
wait $pid 2>/dev/null
[ -e out ] && { echo "OUT exists after kill"; exit 1; }
ls -d out.partial-* >/dev/null 2>&1 || { echo "run finished before the kill; test inconclusive"; exit 1; }
echo "killed mid-run: partial left, no out"
fsdpconv full-to-dcp --world-size 4 -o out big.safetensors
ls -A | grep -v big.safetensors
