# A successful write prints one summary line on stderr (output, format, tensors,
# size, files, seconds), -q silences it, and stdout stays for results.
fsdpconv full-to-dcp --world-size 2 -o out "$FIXTURES/full/tiny_vitlm.pt" &&
fsdpconv reshard --world-size 3 -o out3 out &&
fsdpconv dcp-to-full -o m.safetensors out3 &&
fsdpconv dcp-to-full -o m.pt out3 &&
fsdpconv full-to-dcp --format safetensors --world-size 2 -o st m.safetensors &&
fsdpconv -q dcp-to-full -o q.safetensors out3 && echo stdout-clean
