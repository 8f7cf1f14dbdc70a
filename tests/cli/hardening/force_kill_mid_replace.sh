# --force never loses both checkpoints: killed between moving the old output aside and putting
# the new one in place (the test hook takes the two-rename path and waits there), the old
# checkpoint survives intact as out.old-*, which no later run deletes.
in="$FIXTURES/full/tiny_vitlm.pt"
fsdpconv -q full-to-dcp --world-size 2 -o out "$in" || exit 11
FSDPCONV_TEST_PAUSE_MID_REPLACE=30 fsdpconv full-to-dcp --world-size 3 --force -o out "$in" &
pid=$!
i=0
while [ -z "$(ls -d out.old-* 2>/dev/null)" ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i + 1)); done
kill -9 $pid
wait $pid 2>/dev/null
[ -e out ] && echo "out still there (killed too early?)"
old=$(ls -d out.old-*)
fsdpconv inspect --verify "$old" >/dev/null && echo "old checkpoint intact"
ls "$old" | grep -c distcp
fsdpconv -q full-to-dcp --world-size 3 -o out "$in" && echo "rerun ok"
ls -A out | grep -c distcp
ls -d out.old-* >/dev/null && echo "old kept"
ls -d out.partial-* 2>/dev/null
# without the hook, --force swaps the two atomically and leaves nothing else
fsdpconv -q full-to-dcp --world-size 2 --force -o out "$in" && ls -A | grep -v '^out.old-' | tr '\n' ' '
echo
