#!/bin/sh
# End-to-end GPU engine benchmark (issue: ~10 GB synthetic model, N = 8):
# full-to-dcp --engine cuda vs --engine cpu vs cp of the same file, with a
# bf16 cast so the kernels have work.  Reported, not asserted.  Needs a
# `make CUDA=1` build and a visible GPU; otherwise it says SKIPPED.
# Usage: bench_gpu.sh FSDPCONV PYTHON   (env BENCH_GB, default 10; BENCH_DIR)
set -eu
bin="$1"
py="$2"
gb="${BENCH_GB:-10}"
dir="${BENCH_DIR:-$(mktemp -d /tmp/fc_bench_gpu.XXXXXX)}"
here=$(cd "$(dirname "$0")" && pwd)
if ! "$bin" full-to-dcp --engine cuda --dry-run --world-size 1 \
        "$here/../../fixtures/full/tiny_vitlm.pt" > /dev/null 2>&1; then
    echo "bench_gpu: SKIPPED (this fsdpconv has no usable CUDA engine)"
    exit 0
fi
trap 'rm -rf "$dir"' EXIT
"$py" "$here/make_model.py" "$dir/model" --gb "$gb" > /dev/null
in=$(ls "$dir"/model/*.safetensors | head -n 1)
drop() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true; }
t() { s=$(date +%s.%N); "$@" > /dev/null; e=$(date +%s.%N); awk "BEGIN { printf \"%.2f\", $e - $s }"; }
ratio() { awk "BEGIN { printf \"%.2f\", $1 / $2 }"; }
drop; tcp=$(t cp "$in" "$dir/copy")
rm -f "$dir/copy"
drop; tcpu=$(t "$bin" full-to-dcp --engine cpu --world-size 8 --dtype bf16 -o "$dir/cpu" "$in")
drop; tgpu=$(t "$bin" full-to-dcp --engine cuda --world-size 8 --dtype bf16 -o "$dir/gpu" "$in")
for f in "$dir"/cpu/*.distcp; do cmp "$f" "$dir/gpu/$(basename "$f")"; done
echo "bench_gpu: $(du -sh "$in" | cut -f1) input, N=8, bf16 cast"
echo "  cp            ${tcp} s"
echo "  engine cpu    ${tcpu} s  ($(ratio "$tcpu" "$tcp")x cp)"
echo "  engine cuda   ${tgpu} s  ($(ratio "$tgpu" "$tcp")x cp); outputs byte-identical"
