"""Per-expert MoE safetensors files for the layout tests, written with the
standard library only (as save_pretrained lays them out: one tensor per
expert and projection), and a check of stacked tensors against them.

  moe_st.py write OUT [--experts 0,1,2,3] [--layers 2] [--w2 5x6] [--dtype-of KEY=bf16]
  moe_st.py check STACKED.safetensors PER_EXPERT.safetensors
      gate_up_proj[e] must be cat(w1_e, w3_e) and down_proj[e] w2_e, byte for byte.
"""
import json
import struct
import sys

SIZES = {"F32": 4, "BF16": 2}


def read(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    head.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in head.items()}


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


def tensor(seed, shape, dtype):
    n = 1
    for d in shape:
        n *= d
    vals = [float((seed * 131 + i * 7) % 97) / 8 - 6 for i in range(n)]
    if dtype == "F32":
        return struct.pack("<%df" % n, *vals)
    return b"".join(struct.pack("<f", v)[2:] for v in vals)  # bf16: the high half


def main():
    args = sys.argv[1:]
    if args[0] == "check":
        got, src = read(args[1]), read(args[2])
        layers = sorted({k.split(".")[2] for k in src if ".experts." in k})
        for layer in layers:
            p = "model.layers.%s.block_sparse_moe.experts." % layer
            n = len({k for k in src if k.startswith(p)}) // 3
            gu = b"".join(src[p + "%d.w1.weight" % e][2] + src[p + "%d.w3.weight" % e][2]
                          for e in range(n))
            dn = b"".join(src[p + "%d.w2.weight" % e][2] for e in range(n))
            q = "model.layers.%s.mlp.experts." % layer
            assert got[q + "gate_up_proj"][2] == gu, q + "gate_up_proj"
            assert got[q + "down_proj"][2] == dn, q + "down_proj"
            assert got[q + "gate_up_proj"][1] == [n] + [2 * src[p + "0.w1.weight"][1][0]] + \
                src[p + "0.w1.weight"][1][1:]
        print("stacked tensors equal in %d layers" % len(layers))
        return
    out, experts, layers, w2, dtypes = args[1], ["0", "1", "2", "3"], 2, [5, 6], {}
    i = 2
    while i < len(args):
        if args[i] == "--experts":
            experts = args[i + 1].split(",")  # as written: "01" is not "1"
        elif args[i] == "--layers":
            layers = int(args[i + 1])
        elif args[i] == "--w2":
            w2 = [int(x) for x in args[i + 1].split("x")]
        elif args[i] == "--dtype-of":
            k, v = args[i + 1].split("=")
            dtypes[k] = {"bf16": "BF16", "f32": "F32"}[v]
        i += 2
    t, seed = {}, 1
    for layer in range(layers):
        for e in experts:
            for w, shape in (("w1", [6, 5]), ("w2", w2 if e == experts[-1] else [5, 6]),
                             ("w3", [6, 5])):
                k = "model.layers.%d.block_sparse_moe.experts.%s.%s.weight" % (layer, e, w)
                dt = dtypes.get(k, "F32")
                t[k] = (dt, shape, tensor(seed, shape, dt))
                seed += 1
        k = "model.layers.%d.block_sparse_moe.gate.weight" % layer
        t[k] = ("F32", [len(experts), 5], tensor(seed, [len(experts), 5], "F32"))
        seed += 1
    write(out, t)


main()
