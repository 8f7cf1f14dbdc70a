#!/bin/sh
# CLI tests (zstd's tests/cli-tests shape): every tests/cli/<group>/<case>.sh
# runs in a fresh scratch directory with $FSDPCONV (the binary), $FIXTURES and
# `fsdpconv` on PATH.  Expectations live beside it:
#   <case>.sh.exit          expected exit status (default 0)
#   <case>.sh.stdout.exact  stdout must equal it
#   <case>.sh.stdout.glob   stdout must match this shell glob
#   <case>.sh.stderr.exact  stderr must equal it
#   <case>.sh.stderr.glob   stderr must match this shell glob
# A case that exits 77 could not run here (it says why on stderr): shown as SKIP,
# never counted as passed.
# Usage: run.sh FSDPCONV [--set-exact] [case-path-substring]
set -u
bin="$1"
shift
set_exact=0
filter=""
for a in "$@"; do
    case "$a" in
    --set-exact) set_exact=1 ;;
    *) filter="$a" ;;
    esac
done
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
scratch_root=$(mktemp -d /tmp/fc_cli.XXXXXX)
bindir=$(mktemp -d /tmp/fc_cli_bin.XXXXXX)
ln -s "$bin" "$bindir/fsdpconv"
pass=0
fail=0
skip=0
for t in $(find "$here" -mindepth 2 -name '*.sh' | sort); do
    rel=${t#"$here"/}
    case "$rel" in *"$filter"*) ;; *) continue ;; esac
    scratch="$scratch_root/$(echo "$rel" | tr '/' '_')"
    mkdir -p "$scratch"
    (cd "$scratch" && FSDPCONV="$bin" FIXTURES="$root/fixtures" PATH="$bindir:$PATH" \
        sh "$t" >"$scratch.stdout" 2>"$scratch.stderr")
    rc=$?
    if [ "$rc" -eq 77 ]; then
        skip=$((skip + 1))
        echo "SKIP cli/$rel: $(tail -1 "$scratch.stderr")"
        continue
    fi
    want=0
    [ -f "$t.exit" ] && want=$(cat "$t.exit")
    why=""
    [ "$rc" -eq "$want" ] || why="exit $rc, want $want"
    if [ -f "$t.stdout.exact" ] || [ "$set_exact" -eq 1 ] && [ -f "$t.stdout.exact" ]; then
        if [ "$set_exact" -eq 1 ]; then
            cp "$scratch.stdout" "$t.stdout.exact"
        elif ! cmp -s "$scratch.stdout" "$t.stdout.exact"; then
            why="$why${why:+; }stdout differs: $(diff "$t.stdout.exact" "$scratch.stdout" | head -5 | tr '\n' ' ')"
        fi
    fi
    for s in stdout stderr; do
        if [ -f "$t.$s.glob" ]; then
            pat=$(cat "$t.$s.glob")
            got=$(cat "$scratch.$s")
            # shellcheck disable=SC2254
            case "$got" in
            $pat) ;;
            *) why="$why${why:+; }$s '$(printf '%s' "$got" | head -c 300)' does not match '$pat'" ;;
            esac
        fi
    done
    if [ -f "$t.stderr.exact" ] && ! cmp -s "$scratch.stderr" "$t.stderr.exact"; then
        why="$why${why:+; }stderr differs: $(head -c 300 "$scratch.stderr")"
    fi
    if [ -z "$why" ]; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1))
        echo "FAIL cli/$rel: $why"
    fi
done
rm -rf "$scratch_root" "$bindir"
if [ "$skip" -gt 0 ]; then
    echo "cli: $pass passed, $fail failed, $skip skipped"
else
    echo "cli: $pass passed, $fail failed"
fi
[ "$fail" -eq 0 ]
