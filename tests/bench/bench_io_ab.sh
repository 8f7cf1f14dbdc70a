#!/bin/sh
# Two fsdpconv binaries head to head on the direct-I/O data path (issue 25: io_uring against
# one synchronous request at a time): full-to-dcp --world-size 8, reshard --world-size 6 and
# dcp-to-full -> .safetensors, each --io auto, page cache dropped before every run (measure.py),
# the two binaries' runs of a case back to back in alternating order (A B, then B A) so that
# neither always runs second on a shared, noisy machine.
# usage: sh tests/bench/bench_io_ab.sh FSDPCONV_A FSDPCONV_B PYTHON BENCH_DIR
# env:   BENCH_IO_GB (default 4), BENCH_REPS (default 5)
# Prints each case's walls, user and system CPU and peak RSS per binary (io_ab_report.py).
set -eu
[ $# -eq 4 ] || { echo "usage: $0 FSDPCONV_A FSDPCONV_B PYTHON BENCH_DIR" >&2; exit 2; }
a=$1 b=$2 py=$3 dir=$4
here=$(cd "$(dirname "$0")" && pwd)
gb=${BENCH_IO_GB:-4}
reps=${BENCH_REPS:-5}
res="$dir/ab_results.jsonl"
st="$dir/big/model.safetensors"
out="$dir/ab_out"
mkdir -p "$dir/big" "$out" "$dir/logs"
rm -f "$res"
[ -f "$st" ] || "$py" "$here/make_big_st.py" "$st" --gb "$gb"
cut -d' ' -f1-3 /proc/loadavg >"$dir/ab_loadavg.start"
m() { # m CASE WHICH CMD...
    name=$1_$2
    shift 2
    "$py" "$here/measure.py" --results "$res" --name "$name" --group ab --gb "$gb" --reps 1 \
        --log "$dir/logs/$name.log" --clean "$out/o" -- "$@" >/dev/null
}
one() { # one CASE WHICH BIN: the case with that binary, output $out/o
    case $1 in
    f2d) m f2d "$2" "$3" full-to-dcp --world-size 8 --io auto -o "$out/o" "$st" ;;
    reshard) m reshard "$2" "$3" reshard --world-size 6 --io auto -o "$out/o" "$out/dcp" ;;
    d2f) m d2f "$2" "$3" dcp-to-full --io auto -o "$out/o" "$out/dcp" ;;
    esac
}
rm -rf "$out/dcp"
"$a" -q full-to-dcp --world-size 8 -o "$out/dcp" "$st"
r=0
while [ $r -lt "$reps" ]; do
    r=$((r + 1))
    for c in f2d reshard d2f; do
        if [ $((r % 2)) -eq 1 ]; then
            one $c A "$a"
            one $c B "$b"
        else
            one $c B "$b"
            one $c A "$a"
        fi
    done
done
rm -rf "$out"
cut -d' ' -f1-3 /proc/loadavg >"$dir/ab_loadavg.end"
"$py" - "$res" "$dir" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    rows.setdefault(r["name"], []).append(r)
print("load average (1, 5, 15 min): %s at the start, %s at the end" % (
    open(sys.argv[2] + "/ab_loadavg.start").read().strip(),
    open(sys.argv[2] + "/ab_loadavg.end").read().strip()))
print("| case | best wall s | median | every round | user s | sys s | peak RSS MiB |")
print("|---|---|---|---|---|---|---|")
for name in sorted(rows):
    rs = rows[name]
    walls = [r["wall_s"] for r in rs]
    best = min(rs, key=lambda r: r["wall_s"])
    print("| %s | %.2f | %.2f | %s | %.2f | %.2f | %.0f |" % (
        name, best["wall_s"], statistics.median(walls), " ".join("%.1f" % w for w in walls),
        best["user_s"], best["sys_s"], max(r["maxrss_kib"] for r in rs) / 1024))
PY
