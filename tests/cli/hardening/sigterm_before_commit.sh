# A SIGTERM that arrives after every byte is written and fsynced but before the commit rename
# stops the command: exit 1, nothing left (full-to-dcp, full-to-dcp --nproc 2, reshard,
# dcp-to-full).  The test hook holds the moment just before the commit open.
in="$FIXTURES/full/tiny_vitlm.pt"
dcp="$FIXTURES/dcp/model_ws2"
n=0
for cmd in "full-to-dcp --world-size 2 -o out $in" "full-to-dcp --nproc 2 --world-size 2 -o out $in" \
    "reshard --world-size 3 -o out $dcp" "dcp-to-full -o out $dcp"; do
    n=$((n + 1))
    FSDPCONV_TEST_PAUSE_BEFORE_COMMIT=5 fsdpconv $cmd 2>err &
    pid=$!
    i=0
    # written, synced and waiting at the commit: the partial holds .metadata (or is the file)
    while [ -z "$(ls -d out.partial-*/.metadata 2>/dev/null)" ] && [ ! -f "$(ls -d out.partial-* 2>/dev/null | head -1)" ] &&
        [ $i -lt 1000 ]; do sleep 0.01; i=$((i + 1)); done
    sleep 0.3
    kill -TERM $pid
    wait $pid
    rc=$?
    echo "$n: exit $rc"
    grep -c "interrupted" err
    ls -A | grep -v err
done
exit 0
