# An output created by someone else while dcp-to-full runs is never replaced: exit 2, theirs kept.
FSDPCONV_TEST_PAUSE_BEFORE_COMMIT=2 fsdpconv dcp-to-full -o out.safetensors "$FIXTURES/dcp/model_ws2" 2>err &
pid=$!
i=0
while [ -z "$(ls -d out.safetensors.partial-* 2>/dev/null)" ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i + 1)); done
echo mine > out.safetensors
wait $pid
echo "exit $?"
cat out.safetensors
sed 's/^.*: \(output appeared\)/\1/' err
ls -A | grep -v err
