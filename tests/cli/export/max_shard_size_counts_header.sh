# --max-shard-size bounds whole files (length, header, data), not only tensor
# bytes; only a tensor bigger than the limit by itself makes a bigger file, alone.
fsdpconv dcp-to-full -q --max-shard-size 1K -o s "$FIXTURES/full/tiny_vitlm.pt"
for f in s/model-*.safetensors; do
    size=$(wc -c <"$f")
    n=$(fsdpconv inspect "$f" | tail -n 1 | cut -d" " -f1)
    [ "$size" -le 1024 ] || echo "$(basename "$f"): $size bytes, $n tensor(s)"
done
ls s | wc -l
fsdpconv diff "$FIXTURES/full/tiny_vitlm.pt" s | tail -n 1
