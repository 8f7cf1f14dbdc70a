# Sourced by the bench_*.sh scripts that take FSDPCONV PYTHON BENCH_DIR, after they set
# here (their own folder) and res (their results file):
#   bench_args "$@"          checks the arguments; sets bin, py, dir and logs (created)
#   m NAME [OPTION]... -- CMD  one measured run of CMD as case NAME (measure.py, one repetition),
#                            appended to $res, its output in $logs/NAME.log
bench_args() {
    if [ $# -ne 3 ]; then
        echo "usage: $0 FSDPCONV PYTHON BENCH_DIR" >&2
        exit 2
    fi
    bin=$1
    py=$2
    dir=$3
    logs="$dir/logs"
    mkdir -p "$logs"
}

m() {
    name=$1
    shift
    "$py" "$here/measure.py" --results "$res" --name "$name" --reps 1 \
        --log "$logs/$name.log" "$@"
}
