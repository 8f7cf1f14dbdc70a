# --max-shard-size 5KB is 5000 bytes (as Hugging Face reads it), 5KiB 5120:
# every file stays under its own limit (only a tensor bigger than the limit
# makes a bigger file, alone), and the two limits make different shards.
for size in 5KB:5000 5KiB:5120; do
    fsdpconv dcp-to-full -q --max-shard-size "${size%%:*}" -o "${size%%:*}" "$FIXTURES/full/tiny_vitlm.pt"
    largest=0
    for f in "${size%%:*}"/model-*.safetensors; do
        bytes=$(wc -c <"$f")
        n=$(fsdpconv inspect "$f" | tail -n 1 | cut -d" " -f1)
        [ "$bytes" -le "${size#*:}" ] || [ "$n" -eq 1 ] || echo "$f: $bytes bytes, $n tensors"
        [ "$bytes" -le "$largest" ] || largest=$bytes
    done
    echo "${size%%:*}: $(ls "${size%%:*}"/model-*.safetensors | wc -l) files, largest $largest bytes"
done
