#!/bin/sh
# inspect benchmark: `fsdpconv inspect PATH` (no --checksum) of the multi-GiB model.pt and
# model.safetensors written by make_model.py.
# usage: sh tests/bench/bench_inspect.sh FSDPCONV PYTHON BENCH_DIR
# Appends to BENCH_DIR/results.jsonl: inspect_{pt,st}_cold (page cache dropped before each run;
# falls back to warm without root) and inspect_{pt,st}_warm (one unmeasured run first); each the
# fastest of BENCH_INSPECT_REPS (default 3) runs, peak RSS the largest. Targets (reported, not
# asserted): < 1 s and < 50 MB.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
bench_args "$@"
reps=${BENCH_INSPECT_REPS:-3}
res="$dir/results.jsonl"
echo "inspect:"
for ext in pt st; do
    case $ext in pt) f="$dir/model/model.pt" ;; st) f="$dir/model/model.safetensors" ;; esac
    for cache in cold warm; do
        "$py" "$here/measure.py" --results "$res" --name "inspect_${ext}_$cache" \
            --cache "$( [ $cache = cold ] && echo auto || echo warm )" --reps "$reps" \
            --log "$dir/logs/inspect_${ext}_$cache.log" -- "$bin" inspect "$f"
    done
done
