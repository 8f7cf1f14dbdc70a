#!/bin/sh
# Direct I/O benchmark (issue 25): fsdpconv's data path in each --io mode against two
# yardsticks that move the same bytes: cp + fsync, and a direct-I/O copy (dd iflag=direct
# oflag=direct, 8 MiB requests as fsdpconv's, one in flight; dio_copy.sh).
# usage: sh tests/bench/bench_io.sh FSDPCONV PYTHON BENCH_DIR
# env:   BENCH_IO_GB  model size in GiB (default 8; a streamed safetensors of 64 MiB fp32
#                     tensors, make_big_st.py)
#        BENCH_REPS   interleaved rounds (default 3); io_report.py keeps each case's fastest
#        BENCH_IO_BASE another fsdpconv (a build of main, say): its --io auto cases run in
#                     the same rounds as ours, as *_base rows
# Every run starts with the page cache dropped (measure.py; warm without root, and the report
# says so). Needs about 3.2 x BENCH_IO_GB GiB free in BENCH_DIR. Cases per round:
#   cp_st, dd_st                 yardsticks: copy model.safetensors
#   f2d_{buffered,auto,direct}   full-to-dcp --world-size 8 -o DCP (the last round's auto output
#                                is kept as the input of the next cases)
#   f2d_st_{buffered,auto}       the same with --format safetensors
#   cp_dcp, dd_dcp               yardsticks: copy the DCP's files
#   reshard_{buffered,auto}      reshard --world-size 6 of the DCP
#   d2f_{buffered,auto}          dcp-to-full -o OUT.safetensors of the DCP
#   d2f_auto_noverify            the same with --no-verify (the CRC check's cost)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
bench_args "$@"
gb=${BENCH_IO_GB:-8}
reps=${BENCH_REPS:-3}
base=${BENCH_IO_BASE:-}
res="$dir/io_results.jsonl"
st="$dir/big/model.safetensors"
out="$dir/io_out"
need_kib=$(awk -v g="$gb" 'BEGIN { printf "%d", g * 3.2 * 1048576 }')
avail_kib=$(df -Pk "$dir" | awk 'NR == 2 { print $4 }')
if [ "$avail_kib" -lt "$need_kib" ]; then
    echo "bench_io: $dir has $((avail_kib / 1048576)) GiB free; BENCH_IO_GB=$gb needs about" \
        "$((need_kib / 1048576)) GiB" >&2
    exit 1
fi
rm -f "$res"
mkdir -p "$dir/big" "$out"
"$py" "$here/make_big_st.py" "$st" --gb "$gb"
cut -d' ' -f1-3 /proc/loadavg >"$dir/io_loadavg.start"

m() {
    name=$1
    shift
    "$py" "$here/measure.py" --results "$res" --name "$name" --group io --gb "$gb" --reps 1 \
        --log "$logs/$name.log" "$@"
}
f2d() { # f2d NAME MODE [ARG]...: full-to-dcp --world-size 8 of the model into $out/NAME
    name=$1
    mode=$2
    shift 2
    m "$name" --clean "$out/$name" -- "$bin" full-to-dcp --world-size 8 --io "$mode" "$@" \
        -o "$out/$name" "$st"
}

echo "direct I/O, $gb GiB, $reps rounds:"
r=0
while [ $r -lt "$reps" ]; do
    r=$((r + 1))
    m cp_st --clean "$out/copy" -- sh -c 'cp "$1" "$2" && sync "$2"' sh "$st" "$out/copy"
    m dd_st --clean "$out/copy" -- sh "$here/dio_copy.sh" "$st" "$out/copy"
    rm -f "$out/copy"
    for mode in buffered direct auto; do
        [ $mode = auto ] || rm -rf "$out/dcp"
        f2d f2d_$mode $mode
        [ $mode = auto ] || rm -rf "$out/f2d_$mode"
    done
    if [ -n "$base" ]; then
        m f2d_auto_base --clean "$out/f2d_base" -- "$base" full-to-dcp --world-size 8 --io auto \
            -o "$out/f2d_base" "$st"
        rm -rf "$out/f2d_base"
    fi
    rm -rf "$out/dcp"
    mv "$out/f2d_auto" "$out/dcp"
    for mode in buffered auto; do
        f2d f2d_st_$mode $mode --format safetensors
        rm -rf "$out/f2d_st_$mode"
    done
    m cp_dcp --clean "$out/copy" -- sh -c 'cp -r "$1" "$2" && sync "$2"/*' sh "$out/dcp" \
        "$out/copy"
    m dd_dcp --clean "$out/copy" -- sh "$here/dio_copy.sh" "$out/dcp" "$out/copy"
    rm -rf "$out/copy"
    for mode in buffered auto; do
        m reshard_$mode --clean "$out/resh" -- "$bin" reshard --world-size 6 --io $mode \
            -o "$out/resh" "$out/dcp"
        rm -rf "$out/resh"
        m d2f_$mode --clean "$out/full.safetensors" -- "$bin" dcp-to-full --io $mode \
            -o "$out/full.safetensors" "$out/dcp"
    done
    if [ -n "$base" ]; then
        m reshard_auto_base --clean "$out/resh" -- "$base" reshard --world-size 6 --io auto \
            -o "$out/resh" "$out/dcp"
        rm -rf "$out/resh"
        m d2f_auto_base --clean "$out/full.safetensors" -- "$base" dcp-to-full --io auto \
            -o "$out/full.safetensors" "$out/dcp"
    fi
    m d2f_auto_noverify --clean "$out/full.safetensors" -- "$bin" dcp-to-full --io auto \
        --no-verify -o "$out/full.safetensors" "$out/dcp"
    rm -f "$out/full.safetensors"
done
rm -rf "$out"
cut -d' ' -f1-3 /proc/loadavg >"$dir/io_loadavg.end"
"$py" "$here/io_report.py" "$dir"
