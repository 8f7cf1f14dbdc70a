# Faults of multi-process and array jobs leave a complete checkpoint or none, and the next run
# of the same job resumes or cleans up: kill -9 of a worker or of rank 0 at several points, a
# share killed and rerun, a share run twice (and again after its file changed), a commit with a
# share missing or recorded for another plan, a share or commit while a share is running, two
# jobs writing the same output, --force.
python3 - <<'PY' # 16 x 1024 x 1024 float32, 64 MiB: long enough to be killed mid-way
import json, os, struct
size = 1024 * 1024 * 4
hdr = {f"layers.{i}.weight": {"dtype": "F32", "shape": [1024, 1024],
                              "data_offsets": [i * size, (i + 1) * size]} for i in range(16)}
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
with open("big.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    for i in range(16):
        f.write(os.urandom(size))
PY
in=big.safetensors
job="--world-size 6 --dtype bf16 --threads 1 -o out"
conv() { fsdpconv full-to-dcp $job "$@" "$in"; }
conv 2>/dev/null && mv out one || exit 1
same() { for f in one/.metadata one/*.distcp; do cmp -s "$f" "out/${f#one/}" || return 1; done; }
partials() { ls -d out.partial-* 2>/dev/null | wc -l; }
# The output is either absent or identical; after a failed --nproc run, no staging is left.
outcome() {
    if [ -e out ]; then same || { echo "$1: output differs"; exit 1; }; fi
    [ "$(partials)" = 0 ] || { echo "$1: staging left"; ls -A; exit 1; }
    rm -rf out
}

# kill -9 of a worker at several points, two of them random: the job fails (or had
# committed), no staging stays
random=$(awk 'BEGIN { srand(); printf "%.3f %.3f", rand() * 0.4, rand() * 0.4 }')
for d in 0.02 0.08 0.15 0.25 0.4 $random; do
    fsdpconv full-to-dcp $job --nproc 3 "$in" 2>/dev/null &
    p=$!
    sleep $d
    w=$(pgrep -P $p | head -1)
    [ -n "$w" ] && kill -9 "$w" 2>/dev/null
    wait $p
    outcome "worker killed after $d s (the points were 0.02 0.08 0.15 0.25 0.4 $random)"
done
echo "kill -9 of a worker: complete or nothing, no staging"

# kill -9 of rank 0: its workers stop; the next run resumes the shares recorded and finishes
fsdpconv full-to-dcp $job --nproc 3 "$in" 2>/dev/null &
p=$!
sleep 0.1
if kill -9 $p 2>/dev/null; then
    wait $p
    sleep 0.5
    [ -e out ] && { echo "output after rank 0 was killed"; exit 1; }
else
    rm -rf out # it was done already
fi
conv --nproc 3 2>/dev/null || exit 1
same && [ "$(partials)" = 0 ] && echo "kill -9 of rank 0: the next run finishes the job"
rm -rf out

# --part: a share killed mid-way is missing at the commit; rerunning it completes the job
conv --commit-parts 3 2>&1 | sed 's/partial-job-[0-9a-f]*/partial-job-H/g; s/^fsdpconv: full-to-dcp: //'
[ "$(partials)" = 0 ] || { echo "a commit with no shares left a directory"; exit 1; }
conv --part 0/3 2>/dev/null && conv --part 2/3 2>/dev/null || exit 1
fsdpconv full-to-dcp $job --part 1/3 "$in" 2>/dev/null &
p=$!
sleep 0.05
kill -9 $p 2>/dev/null
wait $p
conv --commit-parts 3 2>&1 | sed 's/partial-job-[0-9a-f]*/partial-job-H/'
conv --part 1/3 2>/dev/null || exit 1
# run twice: kept; changed on disk (same size): written again
conv --part 1/3 2>&1 | sed 's/^fsdpconv: full-to-dcp: //'
st=$(ls -d out.partial-job-*)
printf 'X' | dd of="$st/__1_0.distcp" bs=1 seek=100 conv=notrunc 2>/dev/null
conv --part 1/3 2>&1 | sed 's/^fsdpconv: full-to-dcp: //'
# a share still running (its lock held) stops a second copy of it and the commit
flock "$st/.share-2.lock" sleep 1 &
sleep 0.2
conv --part 2/3 2>&1 | sed 's/^fsdpconv: full-to-dcp: //'
conv --commit-parts 3 2>&1 | sed 's/^fsdpconv: full-to-dcp: //'
wait
# a record of another job's share (here --dtype f16) is refused by the commit
fsdpconv full-to-dcp --world-size 6 --dtype f16 --threads 1 -o out --part 0/3 "$in" 2>/dev/null
echo "staging dirs of two jobs: $(partials)"
other=$(ls -d out.partial-job-* | grep -v "$st")
cp "$st/.share-0-of-3" saved
cp "$other/.share-0-of-3" "$st/.share-0-of-3"
conv --commit-parts 3 2>&1 | sed 's/partial-job-[0-9a-f]*/partial-job-H/g; s/^.*full-to-dcp: //'
cp saved "$st/.share-0-of-3"
conv --commit-parts 3 2>/dev/null && same && echo "--part: identical after the commit"
[ -d "$st" ] && { echo "staging left after the commit"; exit 1; }
# --force: shares and their commit replace an existing output
conv --part 0/2 2>&1 | sed 's/^fsdpconv: full-to-dcp: //'
for k in 0 1; do conv --force --part $k/2 2>/dev/null || exit 1; done
conv --force --commit-parts 2 2>/dev/null && same && echo "--force: replaced"
# a zstd share's record that lost the place of one item is refused (no .metadata from guesses)
z="--world-size 2 --compress zstd -o z $FIXTURES/full/tiny_vitlm.pt"
fsdpconv full-to-dcp $z --part 0/1 2>/dev/null || exit 1
rec=$(ls z.partial-job-*/.share-0-of-1)
grep -v '^extent 3 ' "$rec" >rec && cp rec "$rec"
fsdpconv full-to-dcp $z --commit-parts 1 2>&1 | sed 's/partial-job-[0-9a-f]*/partial-job-H/g; s/^fsdpconv: full-to-dcp: //'
