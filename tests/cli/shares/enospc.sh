# A share that hits ENOSPC (a real one: a 2 MiB tmpfs in a mount namespace made here) fails
# alone: exit 1 with the system's message, its files removed and no record, the other shares'
# records kept.  With space back, rerunning that share and the commit give the checkpoint of
# one process.  Exit 77 (skipped, shown by run.sh) only where the namespace cannot be made.
in="$FIXTURES/full/tiny_vitlm_train.pt"
args="--world-size 4 --select model"
fsdpconv full-to-dcp $args -o out "$in" 2>/dev/null && mv out one || exit 1
unshare -r -m true 2>/dev/null || { echo "unshare -r -m: no user/mount namespaces" >&2; exit 77; }
cat >disk.sh <<'DISK'
mkdir fs && mount -t tmpfs -o size=2m none fs || exit 77
cd fs || exit 1
conv() { fsdpconv full-to-dcp $ARGS -o out "$@" "$IN"; }
for k in 0 2; do conv --part $k/4 2>/dev/null || exit 1; done
free=$(df -k . | awk 'NR == 2 { print $4 }')
dd if=/dev/zero of=filler bs=1k count=$((free - 8)) 2>/dev/null
conv --part 1/4 2>err
echo "share 1 on a full disk: exit $?"
grep -o 'No space left on device' err | head -1
ls -A out.partial-job-*
rm filler
for k in 1 3; do conv --part $k/4 2>/dev/null || exit 1; done
conv --commit-parts 4 2>/dev/null || exit 1
cp -r out ../out
DISK
ARGS=$args IN=$in unshare -r -m sh disk.sh
rc=$?
[ $rc -eq 77 ] && { echo "a tmpfs cannot be mounted here" >&2; exit 77; }
[ $rc -eq 0 ] || exit 1
for f in one/.metadata one/*.distcp; do cmp "$f" "out/${f#one/}" || exit 1; done
echo "identical after the rerun"
