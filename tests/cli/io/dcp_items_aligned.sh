# DCP tensor items of 256 KiB or more (dcp_sink.h, FC_DCP_ALIGN_MIN) start on 4 KiB
# boundaries of their rank file with data/0 at 4096 from the item's start, so the tensor bytes
# start on a 4 KiB boundary; smaller items stay packed right after their predecessor, and
# --compress items stay as zstd writes them.  Checked from .metadata's offsets (inspect
# --json) and each item's zip local header, for full-to-dcp (source order), --nproc 2 (file
# by file: the gaps written as zeros, the same bytes) and reshard; dcp-to-full gives back the
# input's bytes.  tests/interop/test_full_to_dcp.py has torch load the same layout.
cat >gen.py <<'PY'
import json, struct, sys
def write(path, tensors):
    head, blobs, off = {}, [], 0
    for k, (dtype, shape, blob) in tensors.items():
        head[k] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    h = json.dumps(head).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
def blob(seed, n):  # n bytes, no two tensors alike
    return bytes((seed * 131 + i * 7 + i // 251) % 256 for i in range(n))
# Shard(0) on 2 ranks: big 300 x 1024 f32 (600 KiB chunks), odd 261 x 1001 bf16 (262262 and
# 260260 B: one over, one under the 262144 B floor), mid 64 x 1024 f32 (128 KiB), norm 1024 f32.
write(sys.argv[1], {
    "norm.weight": ("F32", [1024], blob(1, 4096)),
    "big.weight": ("F32", [300, 1024], blob(2, 300 * 1024 * 4)),
    "odd.weight": ("BF16", [261, 1001], blob(3, 261 * 1001 * 2)),
    "mid.weight": ("F32", [64, 1024], blob(4, 64 * 1024 * 4)),
    "tail.bias": ("F32", [1000], blob(5, 4000)),
})
PY
cat >check.py <<'PY'
import json, struct, sys
d, want_aligned = sys.argv[1], sys.argv[2] == "aligned"
meta = json.load(sys.stdin)
items = {}  # file -> [(offset, length, key, data bytes)]
for t in meta["tensors"]:
    esz = {"float32": 4, "bfloat16": 2}[t["dtype"]]
    for c in t["chunks"]:
        n = esz
        for s in c["sizes"]:
            n *= s
        items.setdefault(c["file"], []).append((c["offset"], c["length"], t["key"], n))
aligned = packed = 0
for f, its in sorted(items.items()):
    raw = open(f"{d}/{f}", "rb").read()
    end = 0
    for off, length, key, n in sorted(its):
        item = raw[off:off + length]
        if want_aligned:
            at = item.find(b"archive/data/0") - 30
            assert item[at:at + 4] == b"PK\x03\x04", (f, key)
            nlen, elen = struct.unpack_from("<HH", item, at + 26)
            data = off + at + 30 + nlen + elen
        else:  # zstd frames, back to back
            assert item[:4] == b"\x28\xb5\x2f\xfd", (f, key)
        if want_aligned and n >= 256 << 10:
            assert off % 4096 == 0 and data % 4096 == 0 and data - off == 4096, (f, key, off, data)
            assert raw[end:off] == bytes(off - end), (f, key, "gap not zeros")
            aligned += 1
        else:
            assert off == end, (f, key, off, end)
            packed += 1
        end = off + length
    assert end == len(raw), (f, end, len(raw))
print(f"{d}: {aligned} aligned, {packed} packed")
PY
python3 gen.py in.safetensors
fsdpconv full-to-dcp --world-size 2 -o dcp in.safetensors || exit 1
fsdpconv inspect --json dcp | python3 check.py dcp aligned || exit 1
mkdir np && (cd np && fsdpconv full-to-dcp --nproc 2 --world-size 2 -o dcp ../in.safetensors) ||
    exit 1
for f in .metadata __0_0.distcp __1_0.distcp; do cmp "dcp/$f" "np/dcp/$f" || exit 1; done
echo "--nproc 2: same bytes"
fsdpconv full-to-dcp --world-size 2 --compress zstd:1 -o z in.safetensors || exit 1
fsdpconv inspect --json z | python3 check.py z zstd || exit 1
fsdpconv reshard --world-size 3 -o r dcp || exit 1
fsdpconv inspect --json r | python3 check.py r aligned || exit 1
fsdpconv dcp-to-full -o back.safetensors r || exit 1
fsdpconv diff in.safetensors back.safetensors >/dev/null && echo "dcp-to-full: same tensors"
