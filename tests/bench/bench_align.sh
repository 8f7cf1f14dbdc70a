#!/bin/sh
# Two fsdpconv binaries on the direct-I/O data path, in the same interleaved rounds: did a
# change of the output layout (4 KiB-aligned DCP items, issue 25) or of the I/O code make
# full-to-dcp or reshard faster?  Each round runs, for both binaries (which goes first
# alternates), full-to-dcp --world-size 8 --io direct of bench_io.sh's model, then reshard
# --world-size 6 --io direct of that binary's own DCP.
# usage: sh tests/bench/bench_align.sh BASE_FSDPCONV FSDPCONV PYTHON BENCH_DIR
# env:   BENCH_IO_GB  model size in GiB (default 3; make_big_st.py's 64 MiB fp32 tensors)
#        BENCH_REPS   rounds (default 3)
# Page cache dropped before every run (measure.py). Needs about 4.2 x BENCH_IO_GB GiB free.
# Prints each case's best wall, every round's wall, user and system CPU, the new/base ratio
# of each round, and the load average at the start and end.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
if [ $# -ne 4 ]; then
    echo "usage: $0 BASE_FSDPCONV FSDPCONV PYTHON BENCH_DIR" >&2
    exit 2
fi
base=$1
shift
. "$here/lib.sh"
bench_args "$@"
gb=${BENCH_IO_GB:-3}
reps=${BENCH_REPS:-3}
res="$dir/align_results.jsonl"
st="$dir/big/model.safetensors"
out="$dir/align_out"
rm -f "$res"
mkdir -p "$dir/big" "$out"
"$py" "$here/make_big_st.py" "$st" --gb "$gb"
cut -d' ' -f1-3 /proc/loadavg >"$dir/align_loadavg.start"
side() { # side NAME BINARY: one binary's cases of this round
    m "f2d_$1" --gb "$gb" --clean "$out/dcp_$1" -- "$2" full-to-dcp --world-size 8 --io direct \
        -o "$out/dcp_$1" "$st"
    m "reshard_$1" --gb "$gb" --clean "$out/resh_$1" -- "$2" reshard --world-size 6 \
        --io direct -o "$out/resh_$1" "$out/dcp_$1"
    rm -rf "$out/resh_$1"
}
r=0
while [ $r -lt "$reps" ]; do
    r=$((r + 1))
    if [ $((r % 2)) = 1 ]; then
        side base "$base"
        side new "$bin"
    else
        side new "$bin"
        side base "$base"
    fi
done
rm -rf "$out"
cut -d' ' -f1-3 /proc/loadavg >"$dir/align_loadavg.end"
"$py" - "$dir" <<'PY'
import json, os, sys
d = sys.argv[1]
runs = {}
with open(os.path.join(d, "align_results.jsonl")) as f:
    for line in f:
        r = json.loads(line)
        runs.setdefault(r["name"], []).append(r)
start = open(os.path.join(d, "align_loadavg.start")).read().split()
end = open(os.path.join(d, "align_loadavg.end")).read().split()
print("load average (1, 5, 15 min): %s at the start, %s at the end; cache: %s"
      % (" ".join(start), " ".join(end), runs["f2d_new"][0].get("cache", "?")))
print("| case | best wall s | rounds (wall s) | user s | sys s |")
print("|---|---|---|---|---|")
for case in ("f2d_base", "f2d_new", "reshard_base", "reshard_new"):
    rs = runs[case]
    best = min(rs, key=lambda r: r["wall_s"])
    print("| %s | %.2f | %s | %.2f | %.2f |" % (case, best["wall_s"],
          " ".join("%.1f" % r["wall_s"] for r in rs), best["user_s"], best["sys_s"]))
for c in ("f2d", "reshard"):
    ratios = [n["wall_s"] / b["wall_s"] for n, b in zip(runs[c + "_new"], runs[c + "_base"])]
    print("%s new/base per round: %s" % (c, " ".join("%.2f" % x for x in ratios)))
PY
