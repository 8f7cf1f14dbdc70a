# Safetensors reserves the name "__metadata__": every safetensors writer (dcp-to-full to one file
# and to an HF directory, full-to-dcp and reshard --format safetensors) refuses a tensor renamed
# to it with the same one-line message, exit 2, and writes nothing.
dcp="$FIXTURES/dcp/model_ws2"
r='^(.*\.)?emb\.weight$=__metadata__'
fsdpconv dcp-to-full --rename "$r" -o x.safetensors "$dcp" 2>&1
echo "exit $?"
fsdpconv dcp-to-full --max-shard-size 40 --rename "$r" -o hf "$dcp" 2>&1
echo "exit $?"
fsdpconv full-to-dcp --world-size 2 --format safetensors --rename "$r" -o st "$dcp" 2>&1
echo "exit $?"
fsdpconv reshard --world-size 2 --format safetensors --rename "$r" -o rs "$dcp" 2>&1
echo "exit $?"
ls -A
