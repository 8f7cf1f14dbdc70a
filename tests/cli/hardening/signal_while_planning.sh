# SIGTERM and SIGINT are honoured from the start: while rules expand and the plan is built (here
# 14 doubling --copy rules, 655,360 keys, seconds of planning), with and without --dry-run.  The
# run stops within a second, exits 1 with one line, and leaves neither OUT nor OUT.partial-*.
in="$FIXTURES/full/tiny_vitlm.pt"
copies=""
i=1
while [ $i -le 14 ]; do copies="$copies --copy ^(.*)\$=\\1.c$i"; i=$((i + 1)); done
for sig in TERM INT; do
    for mode in --dry-run "-o out"; do
        # shellcheck disable=SC2086
        fsdpconv full-to-dcp --world-size 2 $copies $mode "$in" >/dev/null 2>err &
        pid=$!
        sleep 0.3
        kill -s $sig $pid
        t0=$(date +%s%N)
        wait $pid
        rc=$?
        ms=$(( ($(date +%s%N) - t0) / 1000000 ))
        [ "$ms" -lt 1000 ] && fast=yes || fast="no ($ms ms)"
        echo "$sig $mode: exit $rc, within a second: $fast, $(wc -l <err) line: $(cat err)"
        ls -A | grep -v '^err$'
    done
done
exit 0
