# SIGTERM (or Ctrl-C) mid-run stops at the next slab: exit 1, "interrupted", no OUT, no partial.
n=268435456
hdr='{"w":{"dtype":"F32","shape":[1024,65536],"data_offsets":[0,268435456]}}'
len=$(printf '%s' "$hdr" | wc -c)
printf "\\$(printf %03o $len)\\000\\000\\000\\000\\000\\000\\000" > big.safetensors
printf '%s' "$hdr" >> big.safetensors
head -c $n /dev/zero >> big.safetensors
fsdpconv full-to-dcp --world-size 4 --threads 1 --max-memory 4KiB -o out big.safetensors 2>err &
pid=$!
i=0
# a file inside the partial: writing has started (before that a signal exits at once)
while [ -z "$(ls out.partial-*/*.distcp 2>/dev/null)" ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i + 1)); done
kill -TERM $pid
wait $pid
rc=$?
sed 's/out\.partial-[0-9]*-[0-9a-f]*/out.partial-PID-R/' err
ls -A | grep -v -e big.safetensors -e err
exit $rc
