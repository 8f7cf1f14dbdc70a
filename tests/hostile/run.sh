#!/bin/sh
# Hostile-input runner: every command on every input that gen.py writes.
# Usage: run.sh FSDPCONV PYTHON [case-name-substring]
# Each run must exit 2 or 3 (or 0 for a command the case lists in `readers`; exactly the
# status in `exit` when the case has one),
# print exactly one stderr line naming the input, leave nothing in its output
# directory, finish within $HOSTILE_TIMEOUT seconds (default 30), and, when
# strace works here, open no file outside the input, its output directory and
# the system's library paths (canary files wait beside each input).
set -u
bin="$1"
py="$2"
filter="${3:-}"
limit="${HOSTILE_TIMEOUT:-30}"
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=$(mktemp -d /tmp/fc_hostile.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$py" "$here/gen.py" "$root/fixtures" "$work/cases" || { echo "hostile: gen.py failed"; exit 1; }
tracer=""
# LeakSanitizer cannot run under ptrace: a sanitizer build fails this probe and runs untraced
# (the release build's run, in make test, does the tracing).
if strace -f -qq -o /dev/null "$bin" --version >/dev/null 2>&1; then
    tracer=strace
else
    echo "hostile: no strace here (or a sanitizer build): reads outside the input are checked by exit status and message only"
fi
pass=0
fail=0

# run LABEL CASE CMD...: one command on one case, with every check.
run() {
    label="$1"
    c="$2"
    shift 2
    d="$work/cases/$c"
    rm -rf "$d/out" "$d/tmp"
    mkdir -p "$d/out" "$d/tmp"
    if [ -n "$tracer" ]; then
        TMPDIR="$d/tmp" timeout -s KILL "$limit" strace -f -qq -e trace=open,openat,creat \
            -o "$d/trace" "$bin" "$@" >"$d/stdout" 2>"$d/stderr"
    else
        TMPDIR="$d/tmp" timeout -s KILL "$limit" "$bin" "$@" >"$d/stdout" 2>"$d/stderr"
    fi
    rc=$?
    why=""
    case "$rc" in
    2 | 3) ;;
    0) grep -qx "$label" "$d/readers" || why="exit 0" ;;
    137) why="no answer within ${limit}s" ;;
    *) why="exit $rc" ;;
    esac
    if [ -f "$d/exit" ] && [ "$rc" -ne "$(cat "$d/exit")" ]; then
        why="$why${why:+; }exit $rc, want $(cat "$d/exit")"
    fi
    if [ "$rc" -ne 0 ]; then
        lines=$(wc -l <"$d/stderr")
        [ "$lines" -eq 1 ] || why="$why${why:+; }$lines stderr lines"
        grep -qF "$d/in" "$d/stderr" || why="$why${why:+; }stderr does not name the input"
    fi
    left=$(find "$d/out" "$d/tmp" -mindepth 1 | sed "s|^$d/||")
    [ -z "$left" ] || why="$why${why:+; }left behind: $(echo $left)"
    if [ -n "$tracer" ]; then
        # Successful opens, minus the input, the output, the scratch dir and the system's own.
        outside=$(grep -v -e '= -1 ' -e 'resumed>.*= -1' "$d/trace" | grep -oE '"[^"]*"' | tr -d '"' |
            grep -v -e "^$d/in" -e "^$d/out" -e "^$d/tmp" -e '^/usr/' -e '^/lib' -e '^/proc/' \
                -e '^/sys/' -e '^/dev/' -e '^/etc/ld\.so' | sort -u | head -3)
        [ -z "$outside" ] || why="$why${why:+; }opened outside the input: $(echo $outside)"
    fi
    if [ -z "$why" ]; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1))
        echo "FAIL hostile/$c $label: $why: $(head -c 300 "$d/stderr")"
    fi
}

for c in $(cat "$work/cases/CASES"); do
    case "$c" in *"$filter"*) ;; *) continue ;; esac
    d="$work/cases/$c"
    cp "$root/fixtures/safetensors/dtypes.safetensors" "$d/canary.safetensors"
    cp "$root/fixtures/dcp/model_ws2/__0_0.distcp" "$d/canary.distcp"
    run inspect "$c" inspect "$d/in"
    run verify "$c" inspect --verify "$d/in"
    run checksum "$c" inspect --checksum "$d/in"
    run full-to-dcp "$c" full-to-dcp --world-size 2 -o "$d/out/dcp" "$d/in"
    run reshard "$c" reshard --world-size 3 -o "$d/out/dcp" "$d/in"
    # --format safetensors refuses non-tensor values before reading data, so only cases that
    # name their exit status (chunked inputs of tensors only) run it.
    if [ -f "$d/exit" ]; then
        run full-to-dcp-st "$c" full-to-dcp --format safetensors --world-size 2 -o "$d/out/st" "$d/in"
        run reshard-st "$c" reshard --format safetensors --world-size 3 -o "$d/out/st" "$d/in"
    fi
    run dcp-to-full "$c" dcp-to-full -o "$d/out/model.safetensors" "$d/in"
    run diff "$c" diff "$d/in" "$d/in"
done
echo "hostile: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
