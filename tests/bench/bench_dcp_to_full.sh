#!/bin/sh
# dcp-to-full benchmark: fsdpconv dcp-to-full of a world-size-8 DCP to .pt and .safetensors,
# against PyTorch's torch.distributed.checkpoint.format_utils.dcp_to_torch_save (reported, never
# asserted).
# usage: sh tests/bench/bench_dcp_to_full.sh FSDPCONV PYTHON
# env:   BENCH_GB    checkpoint size in GiB (default 2)
#        BENCH_DIR   scratch directory (default: mktemp -d under /tmp, removed at the end; a given
#                    BENCH_DIR is kept, and the model and DCP of bench_reshard.sh are reused)
#        BENCH_REPS  interleaved rounds (default 3); the report keeps each case's fastest
# Every measured run starts with the page cache dropped (warm runs without root, see
# measure.py); every writer fsyncs its output. Cases per round:
#   torch_dcp_to_torch_save  yardstick: a separate python process running dcp_to_torch_save,
#                            then fsync of the file (reshard_torch_dcp_to_full.py)
#   fsdpconv_pt              fsdpconv dcp-to-full -o OUT.pt DCP
#   fsdpconv_safetensors     fsdpconv dcp-to-full -o OUT.safetensors DCP
#   fsdpconv_safetensors_no_verify  the same with --no-verify: the cost of checking every
#                            item's CRC-32 is the ratio of the two
# The last round's three outputs are checked with PyTorch (reshard_verify.py full: same keys,
# dtypes, shapes, torch.equal to model.pt, hence to each other). Figures:
# BENCH_DIR/dcp_to_full_results.jsonl, table from reshard_report.py.
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
    echo "bench_dcp_to_full: fsdpconv binary not found: $bin" >&2
    exit 1
fi
gb=${BENCH_GB:-2}
reps=${BENCH_REPS:-3}
if [ -n "${BENCH_DIR:-}" ]; then
    dir=$BENCH_DIR
    mkdir -p "$dir"
else
    dir=$(mktemp -d /tmp/fsdpconv-dcp-to-full-bench.XXXXXX)
    trap 'rm -rf "$dir"' EXIT
    trap 'exit 130' INT TERM
fi
dir=$(cd "$dir" && pwd)
cp "$bin" "$dir/fsdpconv.bin"
bin="$dir/fsdpconv.bin"
res="$dir/dcp_to_full_results.jsonl"
out="$dir/out_dcp_to_full"
logs="$dir/logs"
rm -f "$res"
mkdir -p "$out" "$logs"
src="$dir/dcp8_$gb"

m() {
    name=$1
    shift
    "$py" "$here/measure.py" --results "$res" --name "$name" --group dcp_to_full \
        --gb "$gb" --log "$logs/$name.log" "$@"
}

start=$(date +%s)
echo "bench_dcp_to_full: $gb GiB in $dir ($(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))"
"$py" "$here/make_model.py" "$dir/model_$gb" --gb "$gb"
if [ ! -f "$src/.metadata" ]; then
    rm -rf "$src"
    "$bin" full-to-dcp --world-size 8 -o "$src" "$dir/model_$gb/model.pt"
fi
echo "dcp-to-full of the world-size-8 DCP, $reps rounds:"
r=0
while [ "$r" -lt "$reps" ]; do
    r=$((r + 1))
    m torch_dcp_to_torch_save --clean "$out/torch.pt" -- \
        "$py" "$here/reshard_torch_dcp_to_full.py" "$src" "$out/torch.pt"
    m fsdpconv_pt --clean "$out/fsdpconv.pt" -- \
        "$bin" dcp-to-full -o "$out/fsdpconv.pt" "$src"
    m fsdpconv_safetensors --clean "$out/fsdpconv.safetensors" -- \
        "$bin" dcp-to-full -o "$out/fsdpconv.safetensors" "$src"
    m fsdpconv_safetensors_no_verify --clean "$out/fsdpconv.safetensors" -- \
        "$bin" dcp-to-full --no-verify -o "$out/fsdpconv.safetensors" "$src"
done
echo "verify (PyTorch loads of the three outputs vs model.pt):"
"$py" "$here/reshard_verify.py" full "$dir/model_$gb/model.pt" \
    "$out/torch.pt" "$out/fsdpconv.pt" "$out/fsdpconv.safetensors" \
    | tee "$dir/dcp_to_full_verify.jsonl"
ls -l "$out" >"$dir/dcp_to_full_sizes.txt"
rm -rf "$out"
echo "bench_dcp_to_full: done in $(( $(date +%s) - start )) s"
"$py" "$here/reshard_report.py" "$dir" dcp_to_full
