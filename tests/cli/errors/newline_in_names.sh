# A newline (or any control byte) in a name an input gives, here a shard file name and a key of a
# model.safetensors.index.json, is escaped as \x0a in the message, which stays one line.
mkdir hf
printf '{"metadata":{},"weight_map":{"w":"shard\\n1.safetensors"}}' >hf/model.safetensors.index.json
fsdpconv inspect hf 2>err
echo "exit $?"
cat err
wc -l <err
fsdpconv dcp-to-full -o one.safetensors "$FIXTURES/dcp/model_ws2" || exit 11
printf '{"metadata":{},"weight_map":{"a\\nb":"one.safetensors"}}' >model.safetensors.index.json
fsdpconv inspect model.safetensors.index.json 2>err
echo "exit $?"
cat err
wc -l <err
