# Open descriptors stay bounded (issue 20 item 7): checkpoints of more files than `ulimit -n`
# allows are read by every command.  Written first without the limit: a 1100-rank sharded
# safetensors dir (every file holds every tensor), a 1100-rank DCP whose ranks all hold data,
# and a 300-shard index dir; then read under `ulimit -n 128`, each result checked by diff.
in="$FIXTURES/full/tiny_vitlm.pt"
python3 - <<'PY'
import json, struct
def st(path, tensors):
    hdr, data = {}, b""
    for name, rows, cols in tensors:
        vals = [float(len(data) // 4 + i) for i in range(rows * cols)]
        blob = struct.pack("<%df" % len(vals), *vals)
        hdr[name] = {"dtype": "F32", "shape": [rows, cols], "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + data)
st("rows.safetensors", [("w", 2200, 4), ("b", 1100, 1)])
st("many.safetensors", [("t%03d" % i, 2, 3) for i in range(300)])
PY
fsdpconv full-to-dcp --world-size 1100 --format safetensors -o st1100 "$in"
fsdpconv full-to-dcp --world-size 1100 -o dcp1100 rows.safetensors
fsdpconv dcp-to-full --max-shard-size 24 -o idx300 "$(fsdpconv full-to-dcp --world-size 1 -o one many.safetensors >/dev/null && echo one)"
echo "files: $(ls st1100 | wc -l) $(ls dcp1100 | wc -l) $(ls idx300 | wc -l)"
ulimit -n 128 || exit 1
fsdpconv inspect --checksum st1100 | tail -1
fsdpconv inspect --checksum dcp1100 | tail -1
fsdpconv inspect --checksum idx300 | tail -1
fsdpconv dcp-to-full -o st.safetensors st1100 && fsdpconv diff st.safetensors "$in" | tail -1
fsdpconv reshard --world-size 3 -o st3 st1100 && fsdpconv diff st3 "$in" | tail -1
fsdpconv dcp-to-full -o rows.pt dcp1100 && fsdpconv diff rows.pt rows.safetensors | tail -1
fsdpconv reshard --world-size 3 -o rows3 dcp1100 && fsdpconv diff rows3 rows.safetensors | tail -1
fsdpconv full-to-dcp --world-size 2 -o many2 idx300 && fsdpconv diff many2 many.safetensors | tail -1
# every shard of the index as an input of its own
fsdpconv full-to-dcp --world-size 2 -o many2b idx300/*.safetensors &&
    fsdpconv diff many2b many.safetensors | tail -1
