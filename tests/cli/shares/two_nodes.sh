# Two "nodes": two network namespaces joined by a veth pair (10.77.0.1 and 10.77.0.2), made
# here in an unprivileged user namespace.  Each node starts two torchrun-style ranks (RANK,
# WORLD_SIZE, MASTER_ADDR, MASTER_PORT) that share the output directory; rank 0 listens on
# node A's address.  The checkpoint equals one process's.  Exit 77 (skipped, shown by run.sh)
# only where the namespaces cannot be made.
in="$FIXTURES/full/tiny_vitlm_train.pt"
args="--mesh replicate=2,shard=3 --select model --dtype bf16"
fsdpconv full-to-dcp $args -o out "$in" 2>/dev/null && mv out one || exit 1
unshare -r -n true 2>/dev/null || { echo "unshare -r -n: no user/network namespaces" >&2; exit 77; }
cat >nodes.sh <<'NODES'
set -u
ip link set lo up || exit 77
unshare -n sh -c 'echo $$ >b.pid; exec sleep 120' &
while [ ! -s b.pid ]; do sleep 0.05; done
b=$(cat b.pid)
ip link add vA type veth peer name vB netns "$b" || { kill "$b"; exit 77; }
ip addr add 10.77.0.1/24 dev vA && ip link set vA up || exit 77
nsenter -t "$b" -n sh -c 'ip link set lo up && ip addr add 10.77.0.2/24 dev vB && ip link set vB up' || exit 77
export WORLD_SIZE=4 MASTER_ADDR=10.77.0.1 MASTER_PORT=29517
pids=""
node() { # node NS_PID RANK...: ranks of one node, in its namespace ("" = this one)
    ns=$1
    shift
    for r in "$@"; do
        if [ -n "$ns" ]; then
            RANK=$r nsenter -t "$ns" -n fsdpconv full-to-dcp $ARGS -o out "$IN" 2>"err$r" &
        else
            RANK=$r fsdpconv full-to-dcp $ARGS -o out "$IN" 2>"err$r" &
        fi
        pids="$pids $!"
    done
}
node "$b" 3 2
node "" 1 0
rc=0
for p in $pids; do wait "$p" || rc=1; done
kill "$b" 2>/dev/null
exit $rc
NODES
ARGS=$args IN=$in unshare -r -n sh nodes.sh
rc=$?
[ $rc -eq 77 ] && { echo "veth between namespaces cannot be made here" >&2; exit 77; }
[ $rc -eq 0 ] || { cat err* >&2; exit 1; }
for f in one/.metadata one/*.distcp; do cmp "$f" "out/${f#one/}" || exit 1; done
echo "4 ranks on 2 namespaces: $(ls -A out | wc -l) files identical"
