#!/bin/sh
# Benchmarks of fsdpconv against cp and PyTorch's own converter (reported, never asserted).
# usage: sh tests/bench/run.sh FSDPCONV PYTHON          (`make bench`)
# env:   BENCH_GB    model size in GiB (default 2; fractions allowed, < 0.75 uses H=1024)
#        BENCH_DIR   scratch directory (default: mktemp -d under /tmp, removed at the end;
#                    a given BENCH_DIR is kept, and its model is reused when BENCH_GB matches)
#        BENCH_REPS  interleaved rounds of the conversion cases, best reported (default 3)
#        BENCH_LOAD_REPS  interleaved rounds of the 4-rank load cases (default 2)
#        BENCH_LOAD_GB  size of the second model the load side runs on (default 0.5: the 512 MiB,
#                    345-tensor model issue 14 states its targets for; 0 skips it)
#        BENCH_INSPECT_REPS  runs per inspect case (default 3)
#        BENCH_WORKERS_GB  the independent workers' model (default 4, 0 skips; bench_workers.py)
#        BENCH_TRAIN_RANKS, BENCH_TRAIN_ROUNDS  the training-start headline (default 1,4 and 3;
#                    BENCH_TRAIN_RANKS=0 skips it): bench_train_start.py
#        BENCH_IO_GB  size of the direct-I/O benchmark's model (default 8, 0 skips; bench_io.sh)
# Needs about 6 x BENCH_GB GiB free in BENCH_DIR and 3 x BENCH_GB GiB of RAM. Drops the page
# cache before every measured run when it can (root); otherwise measures warm (see measure.py).
# Writes BENCH_DIR/results.jsonl (raw figures) and prints BENCH_DIR/summary.md (tables).
set -eu
if [ $# -ne 2 ]; then
    echo "usage: $0 FSDPCONV PYTHON" >&2
    exit 2
fi
bin=$1
py=$2
case "$bin" in /*) ;; *) bin="$(pwd)/$bin" ;; esac
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -x "$bin" ]; then
    echo "bench: fsdpconv binary not found: $bin" >&2
    exit 1
fi
if ! "$py" -c 'import torch, safetensors' >/dev/null 2>&1; then
    echo "bench: $py cannot import torch and safetensors (run make venv)" >&2
    exit 1
fi
gb=${BENCH_GB:-2}
if [ -n "${BENCH_DIR:-}" ]; then
    dir=$BENCH_DIR
    mkdir -p "$dir"
else
    dir=$(mktemp -d /tmp/fsdpconv-bench.XXXXXX)
    trap 'rm -rf "$dir"' EXIT
    trap 'exit 130' INT TERM
fi
dir=$(cd "$dir" && pwd)
need_kib=$(awk -v g="$gb" 'BEGIN { printf "%d", g * 6 * 1048576 }')
avail_kib=$(df -Pk "$dir" | awk 'NR == 2 { print $4 }')
if [ "$avail_kib" -lt "$need_kib" ]; then
    echo "bench: $dir has $((avail_kib / 1048576)) GiB free; BENCH_GB=$gb needs about" \
        "$((need_kib / 1048576)) GiB" >&2
    exit 1
fi
rm -f "$dir/results.jsonl" "$dir/summary.md"
# a private copy, so a rebuild of the tree during the run cannot swap the binary under test
cp "$bin" "$dir/fsdpconv.bin"
bin="$dir/fsdpconv.bin"
cut -d' ' -f1-3 /proc/loadavg >"$dir/loadavg.start"
start=$(date +%s)
echo "bench: BENCH_GB=$gb in $dir ($(nproc) cores, load $(cat "$dir/loadavg.start"))"
"$py" "$here/make_model.py" "$dir/model" --gb "$gb"
sh "$here/bench_inspect.sh" "$bin" "$py" "$dir"
sh "$here/bench_full_to_dcp.sh" "$bin" "$py" "$dir"
sh "$here/bench_load_formats.sh" "$bin" "$py" "$dir"
sh "$here/bench_tcp.sh" "$bin" "$py" "$dir"
echo
"$py" "$here/report.py" "$dir" "$bin"
echo
# The load side again on a model with as many tensors as a real one of its size has (per-tensor
# costs of the readers weigh in): make_model.py --gb 0.5 writes 345 tensors of H=1024.
load_gb=${BENCH_LOAD_GB:-0.5}
if [ "$load_gb" != 0 ]; then
    "$py" "$here/make_model.py" "$dir/load/model" --gb "$load_gb"
    rm -f "$dir/load/results.jsonl"
    cut -d' ' -f1-3 /proc/loadavg >"$dir/load/loadavg.start"
    sh "$here/bench_load_formats.sh" "$bin" "$py" "$dir/load"
    echo
    "$py" "$here/report.py" "$dir/load" "$bin"
fi
echo
sh "$here/bench_multi_input.sh" "$bin" "$py" "$dir"
# reshard (vs cp -r) and dcp-to-full (vs dcp_to_torch_save) reuse the same model.
echo
BENCH_DIR="$dir/reshard" sh "$here/bench_reshard.sh" "$bin" "$py"
BENCH_DIR="$dir/reshard" sh "$here/bench_dcp_to_full.sh" "$bin" "$py"
echo
"$py" "$here/bench_many_tensors.py" "$bin" "$dir/many_tensors"
# Issue 11's metadata case: 1,000 tensors x 1,000 ranks = 1,000,000 chunks (a 1.6 GiB checkpoint,
# written once and kept); BENCH_META_TENSORS=100 makes it 100k.
"$py" "$here/bench_metadata.py" "$bin" "$dir/metadata" --tensors "${BENCH_META_TENSORS:-1000}"
echo
# 4-rank load on a dp=2 x tp=2 mesh: TP-layout DCP vs plain --world-size 4 (a ~1 GiB model)
"$py" "$here/bench_tp_load.py" "$bin" "$dir/tp_load" --rounds "${BENCH_LOAD_REPS:-2}"
echo
# The headline: a training start the FSDP1 way against meta-init + dcp.load of fsdpconv's output,
# on a 1.1 B-parameter Llama (2.2 GB bf16), 1 and 4 gloo ranks, cold (BENCH_TRAIN_RANKS, _ROUNDS;
# BENCH_TRAIN_RANKS=0 skips it).
if [ "${BENCH_TRAIN_RANKS:-1,4}" != 0 ]; then
    "$py" "$here/bench_train_start.py" "$bin" "$dir/train_start" --ranks "${BENCH_TRAIN_RANKS:-1,4}" \
        --rounds "${BENCH_TRAIN_ROUNDS:-3}" --results "$dir/results.jsonl"
fi
echo
# Independent workers (issue 22): 1, 2 and 4 torchrun-style ranks on a BENCH_WORKERS_GB (default 4)
# GiB model against cp + fsync, with each worker's read bytes; BENCH_WORKERS_GB=0 skips it.
[ "${BENCH_WORKERS_GB:-4}" = 0 ] ||
    "$py" "$here/bench_workers.py" "$bin" --gb "${BENCH_WORKERS_GB:-4}" --dir "$dir/workers"
echo
# Direct I/O against cp + fsync and a direct-I/O dd copy, on a BENCH_IO_GB (default 8) GiB model
# of its own (issue 25); BENCH_IO_GB=0 skips it.
[ "${BENCH_IO_GB:-8}" = 0 ] || sh "$here/bench_io.sh" "$bin" "$py" "$dir"
echo "bench: done in $(( $(date +%s) - start )) s"
