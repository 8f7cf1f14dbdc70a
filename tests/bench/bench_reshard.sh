#!/bin/sh
# reshard benchmark: fsdpconv reshard of a world-size-8 DCP to world size 4, against cp -r of the
# same DCP directory, at two checkpoint sizes (reported, never asserted).
# usage: sh tests/bench/bench_reshard.sh FSDPCONV PYTHON
# env:   BENCH_GB        size of the large checkpoint in GiB (default 2)
#        BENCH_SMALL_GB  size of the small one (default 0.75: H=4096 like the large one, so only
#                        the number of layers differs; equal to BENCH_GB: large only)
#        BENCH_DIR       scratch directory (default: mktemp -d under /tmp, removed at the end; a
#                        given BENCH_DIR is kept and its models and DCPs are reused when the size
#                        matches, e.g. by bench_dcp_to_full.sh)
#        BENCH_REPS      interleaved rounds (default 3); the report keeps each case's fastest
# Inputs: make_model.py writes the synthetic model, `fsdpconv full-to-dcp --world-size 8` its DCP.
# Every measured run starts with the page cache dropped (warm runs without root, see
# measure.py). Cases per size and round:
#   cp_r_fsync   yardstick: cp -r DCP OUT, then fsync of every copied file and of OUT (fsdpconv
#                fsyncs its output too)
#   cp_r         cp -r without fsync (information only)
#   reshard_ws4  fsdpconv reshard --world-size 4 -o OUT DCP
#   reshard_ws4_no_verify  the same with --no-verify (the cost of the CRC-32 checks)
# The last round's large reshard output is checked with PyTorch (reshard_verify.py dcp: 4 rank
# files, every tensor torch.equal to model.pt). Figures: BENCH_DIR/reshard_results.jsonl, table
# from reshard_report.py.
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
    echo "bench_reshard: fsdpconv binary not found: $bin" >&2
    exit 1
fi
gb=${BENCH_GB:-2}
small=${BENCH_SMALL_GB:-0.75}
reps=${BENCH_REPS:-3}
if [ -n "${BENCH_DIR:-}" ]; then
    dir=$BENCH_DIR
    mkdir -p "$dir"
else
    dir=$(mktemp -d /tmp/fsdpconv-reshard-bench.XXXXXX)
    trap 'rm -rf "$dir"' EXIT
    trap 'exit 130' INT TERM
fi
dir=$(cd "$dir" && pwd)
# a private copy, so a rebuild of the tree during the run cannot swap the binary under test
cp "$bin" "$dir/fsdpconv.bin"
bin="$dir/fsdpconv.bin"
res="$dir/reshard_results.jsonl"
out="$dir/out_reshard"
logs="$dir/logs"
rm -f "$res"
mkdir -p "$out" "$logs"
sizes=$gb
if [ "$small" != "$gb" ]; then
    sizes="$small $gb"
fi

# prepare GB: DIR/model_GB (make_model.py, reused when it matches) and DIR/dcp8_GB
prepare() {
    "$py" "$here/make_model.py" "$dir/model_$1" --gb "$1"
    if [ ! -f "$dir/dcp8_$1/.metadata" ]; then
        rm -rf "$dir/dcp8_$1"
        "$bin" full-to-dcp --world-size 8 -o "$dir/dcp8_$1" "$dir/model_$1/model.pt"
    fi
}

m() {
    name=$1
    g=$2
    shift 2
    "$py" "$here/measure.py" --results "$res" --name "$name" --group reshard \
        --gb "$g" --log "$logs/$name.log" "$@"
}

start=$(date +%s)
echo "bench_reshard: sizes $sizes GiB in $dir ($(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))"
for g in $sizes; do
    prepare "$g"
done
echo "reshard world size 8 -> 4 vs cp -r, $reps rounds:"
r=0
while [ "$r" -lt "$reps" ]; do
    r=$((r + 1))
    for g in $sizes; do
        src="$dir/dcp8_$g"
        dst="$out/$g"
        m "cp_r_fsync@$g" "$g" --clean "$dst" -- sh -c \
            'cp -r "$1" "$2" && find "$2" -type f -exec sync {} + && sync "$2"' sh "$src" "$dst"
        m "cp_r@$g" "$g" --clean "$dst" -- cp -r "$src" "$dst"
        rm -rf "$dst"
        m "reshard_ws4_no_verify@$g" "$g" --clean "$dst" -- \
            "$bin" reshard --no-verify --world-size 4 -o "$dst" "$src"
        rm -rf "$dst"
        m "reshard_ws4@$g" "$g" --clean "$dst" -- "$bin" reshard --world-size 4 -o "$dst" "$src"
        if [ "$r" -lt "$reps" ] || [ "$g" != "$gb" ]; then
            rm -rf "$dst"
        fi
    done
done
echo "verify (PyTorch dcp load of the $gb GiB reshard output vs model.pt):"
"$py" "$here/reshard_verify.py" dcp "$dir/model_$gb/model.pt" "$out/$gb" --world-size 4 \
    | tee "$dir/reshard_verify.jsonl"
rm -rf "$out"
echo "bench_reshard: done in $(( $(date +%s) - start )) s"
"$py" "$here/reshard_report.py" "$dir" reshard
