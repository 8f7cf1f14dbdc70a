#!/usr/bin/env python3
"""Regenerate the torch-verified tables embedded in tests/unit/test_kernels_cpu.c.

Usage: ~/.cache/fsdpconv/venv/bin/python tests/unit/gen_kernels_cpu_vectors.py [--write]
       [--check-paths]

Without --write the generated C block is printed; with --write it replaces the
block between the BEGIN/END GENERATED markers of test_kernels_cpu.c.

What is generated (all by real torch, on the CPU):
  * special values: for each float dtype a list of input bit patterns (zeros,
    infinities, NaNs with payloads and signs, subnormals, max, exact ties,
    double-rounding traps) and torch's result of .to() for every other dtype;
  * checksums of torch's .to() over pseudo-random inputs (splitmix64, the C test
    regenerates the same inputs) for float64/float32 sources and over every one
    of the 65536 patterns for float16/bfloat16 sources;
  * DTensor boxes from torch.distributed.tensor._utils.
    _compute_local_shape_and_global_offset for 1-D, 2-D and 3-D meshes.

Why the source tensor is non-contiguous: torch's CPU casts are not consistent
for NaNs (the AVX2/AVX512 contiguous float32->bfloat16 loop writes 0xffff, the
scalar c10::BFloat16 rule 0x7fc0; the scalar tail of float16->float32 loses NaN
signs).  A strided source takes one consistent path, the one fsdpconv follows.
--check-paths shows that the paths differ only in NaN patterns.
"""
import os
import re
import sys

import numpy as np
import torch

M64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15
SEED = 0x66736470636F6E76  # "fsdpconv"
N_F32 = 1 << 18
N_F64 = 1 << 17

DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16]
NAMES = ["f64", "f32", "f16", "bf16"]
RAW = [np.uint64, np.uint32, np.uint16, np.uint16]
INT_VIEW = [torch.int64, torch.int32, torch.int16, torch.int16]


def mix64(z):
    """splitmix64's output function on a numpy uint64 array (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def draws(seed, start, n):
    """Draws start .. start+n-1 of the stream: mix64(seed + (i + 1) * GAMMA)."""
    i = np.arange(start, start + n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return mix64(np.uint64(seed) + (i + np.uint64(1)) * np.uint64(GAMMA))


def u64(x):
    return np.uint64(x)


def gen_f32(n):
    """float32 bit patterns; mirrored by fc_test_gen_f32() in the C test."""
    r = draws(SEED, 0, n)
    kind = r & u64(7)
    b = (r >> u64(32)) & u64(0xFFFFFFFF)
    k2 = (r >> u64(8)) & u64(0xFFFFFF)
    e16 = u64(102) + k2 % u64(42)  # exponents whose float16 result is subnormal .. inf
    tbit = np.where(e16 <= u64(112), u64(125) - e16, u64(12))
    x = b.copy()  # kinds 0, 1: any bits
    x = np.where(kind == 2, (b & u64(0xFFFF0000)) | u64(0x8000), x)  # bfloat16 tie
    x = np.where(kind == 3, (b & u64(0xFFFFE000)) | u64(0x1000), x)  # float16 tie (normal)
    x = np.where(kind == 4, (b & u64(0x807FFFFF)) | (e16 << u64(23)), x)
    tie = (b & u64(0x807FFFFF) & ~((u64(2) << tbit) - u64(1))) | (u64(1) << tbit)
    x = np.where(kind == 5, tie | (e16 << u64(23)), x)  # float16 tie, subnormal results too
    x = np.where(kind == 6, b & u64(0x80FFFFFF), x)  # float32 subnormals, tiny normals
    big = np.where(k2 & u64(1) == u64(1), u64(0xFF), u64(0x8E) + (k2 >> u64(1)) % u64(4))
    x = np.where(kind == 7, (b & u64(0x807FFFFF)) | (big << u64(23)), x)  # inf/NaN, near 65504
    return x.astype(np.uint32)


def gen_f64(n):
    """float64 bit patterns; mirrored by fc_test_gen_f64() in the C test."""
    r = draws(SEED ^ 0x64, 0, 2 * n)
    a = r[0::2]
    b = r[1::2]
    kind = a & u64(7)
    k2 = (a >> u64(8)) & u64(0xFFFFFF)
    low29 = ((a >> u64(32)) & u64(0x1FFFFFFF)) | u64(1)
    e32 = u64(1023 - 152) + k2 % u64(284)  # float32 subnormals .. past float32 max
    e16 = u64(1023 - 14) + k2 % u64(30)  # float16 normals
    sign_man = b & u64(0x800FFFFFFFFFFFFF)
    up = (k2 & u64(1)) == u64(0)  # tie from below (0x8000) or from just under it (0x7fff...)
    x = b.copy()  # kind 0: any bits
    x = np.where((kind == 1) | (kind == 2), sign_man | (e32 << u64(52)), x)
    # exact float32 tie: the 29 bits float32 drops are exactly one half
    x = np.where(kind == 3, (b & u64(0x800FFFFFE0000000)) | u64(0x10000000) | (e32 << u64(52)), x)
    # bfloat16 double rounding: float32 mantissa low 16 bits land on a tie
    mid = np.where(up, u64(0x8000), u64(0x7FFF))
    lo = np.where(up, low29 & u64(0x0FFFFFFF), low29 | u64(0x10000000))
    x = np.where(kind == 4, (b & u64(0x800FE00000000000)) | (mid << u64(29)) | lo
                 | (e32 << u64(52)), x)
    # float16 double rounding: float32 mantissa low 13 bits land on a tie
    mid = np.where(up, u64(0x1000), u64(0x0FFF))
    x = np.where(kind == 5, (b & u64(0x800FFC0000000000)) | (mid << u64(29)) | lo
                 | (e16 << u64(52)), x)
    x = np.where(kind == 6, b & u64(0x801FFFFFFFFFFFFF), x)  # zero/subnormal float64
    big = np.where(k2 & u64(2) == u64(2), u64(0x7FF), u64(1023 + 14) + (k2 >> u64(2)) % u64(4))
    x = np.where(kind == 7, sign_man | (big << u64(52)), x)  # inf/NaN, near 65504
    return x


def checksum(raw):
    """sum(v[i] * (2i + 1)) mod 2^64 over the raw output values; mirrored in C."""
    v = raw.astype(np.uint64)
    w = np.arange(len(v), dtype=np.uint64) * u64(2) + u64(1)
    with np.errstate(over="ignore"):
        return int(np.sum(v * w, dtype=np.uint64))


def as_tensor(bits, si):
    t = torch.from_numpy(np.ascontiguousarray(bits.astype(RAW[si])).view(np.int64 if si == 0 else
                         np.int32 if si == 1 else np.int16).copy())
    return t.view(DTYPES[si])


def torch_cast(bits, si, di, contiguous=False):
    """torch's .to() of the bit patterns; strided source unless contiguous."""
    t = as_tensor(bits, si)
    if not contiguous:
        wide = torch.zeros(2 * len(bits), dtype=DTYPES[si])
        wide[0::2] = t
        t = wide[0::2]
    out = t.to(DTYPES[di]).contiguous().view(INT_VIEW[di]).numpy()
    return out.view(RAW[di]).copy()


SPECIALS = {
    0: [0x0, 0x8000000000000000, 0x3FF0000000000000, 0x7FF0000000000000, 0xFFF0000000000000,
        0x7FF8000000000000, 0x7FF0000000000001, 0x7FF0000020000000, 0xFFF4000000000000,
        0x7FFFFFFFFFFFFFFF, 0x3FF0100000001000, 0x3FF0020000001000, 0x3FF0100000000000,
        0x47EFFFFFE0000000, 0x47EFFFFFF0000000, 0x36A0000000000000, 0x3690000000000000,
        0x3690000000000001, 0x0000000000000001, 0x7E37E43C8800759C, 0x81B0000000000000,
        0x40EFFC0000000000, 0x40EFFE0000000000, 0x3E70000000000000, 0x3E60000000000000,
        0x400921FB54442D18, 0xBFD5555555555555],
    1: [0x0, 0x80000000, 0x3F800000, 0xBF800000, 0x7F800000, 0xFF800000, 0x7FC00000,
        0xFFC00000, 0x7F800001, 0xFF800001, 0x7FA00000, 0x7FFFFFFF, 0xFFFFFFFF, 0x7F812345,
        0x00000001, 0x00400000, 0x807FFFFF, 0x00800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x3F808000,
        0x3F818000, 0x3F808001, 0x3F807FFF, 0x7F7F8000, 0x7F7F7FFF, 0x477FE000, 0x477FEFFF,
        0x477FF000, 0x47800000, 0x38800000, 0x387FC000, 0x387FE000, 0x33800000, 0x33000000,
        0x33000001, 0x33C00000, 0x34200000, 0x3F801000, 0x3F803000, 0xC0490FDB, 0x3EAAAAAB],
    2: [0x0000, 0x8000, 0x3C00, 0x7C00, 0xFC00, 0x7E00, 0x7C01, 0xFD01, 0x7FFF, 0x0001,
        0x03FF, 0x0400, 0x7BFF, 0xFBFF, 0x3555],
    3: [0x0000, 0x8000, 0x3F80, 0x7F80, 0xFF80, 0x7FC0, 0x7F81, 0xFF81, 0x7FFF, 0x0001,
        0x007F, 0x0080, 0x7F7F, 0x477F, 0x4780, 0x3880, 0x3380, 0x3300, 0x3F81, 0x4049],
}


def inputs(si):
    if si == 0:
        return gen_f64(N_F64)
    if si == 1:
        return gen_f32(N_F32)
    return np.arange(65536, dtype=np.uint64)


def mesh_cases():
    """(shape, mesh sizes, shard dims (-1 = Replicate)) for the DTensor box table."""
    cases = []
    for n in range(1, 10):
        for shape in [(5,), (7, 3), (3, 10), (0, 4)]:
            for d in range(len(shape)):
                cases.append((shape, (n,), (d,)))
    for mesh in [(2, 3), (3, 2), (2, 4)]:
        for dims in [(0, 0), (0, 1), (1, 0), (-1, 1), (1, 1), (-1, -1)]:
            for shape in [(7, 5), (3, 10)]:
                cases.append((shape, mesh, dims))
    cases.append(((9, 5), (2, 2, 2), (0, 1, 0)))
    cases.append(((2, 3, 4), (3, 1, 2), (2, -1, 0)))
    return cases


def torch_boxes(shape, mesh, dims):
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor._utils import _compute_local_shape_and_global_offset
    placements = [Replicate() if d < 0 else Shard(d) for d in dims]
    out = []
    for rank in range(int(np.prod(mesh))):
        coord = list(np.unravel_index(rank, mesh))
        size, off = _compute_local_shape_and_global_offset(shape, mesh, [int(c) for c in coord],
                                                           placements)
        out.append((list(off), list(size)))
    return out


def wrap(items, indent="    ", width=100, open_="", close=","):
    """Join C initialiser items into lines no longer than width."""
    lines = []
    cur = indent + open_
    for i, item in enumerate(items):
        piece = item + ("," if i + 1 < len(items) else "")
        if len(cur) + len(piece) + 1 > width - len(close) and cur.strip() not in ("", open_.strip()):
            lines.append(cur.rstrip())
            cur = indent + "  " + " " * len(open_.strip())
        cur += piece + " "
    lines.append(cur.rstrip() + close)
    return lines


def c_block():
    lines = ["/* BEGIN GENERATED by tests/unit/gen_kernels_cpu_vectors.py (torch %s) */"
             % torch.__version__]
    lines.append("#define FC_TV_SEED UINT64_C(0x%016x)" % SEED)
    lines.append("#define FC_TV_N_F32 %d" % N_F32)
    lines.append("#define FC_TV_N_F64 %d" % N_F64)
    lines.append("/* {input, .to(float64), .to(float32), .to(float16), .to(bfloat16)} as bits */")
    for si in range(4):
        x = np.array(SPECIALS[si], dtype=np.uint64)
        outs = [x if di == si else torch_cast(x, si, di).astype(np.uint64) for di in range(4)]
        lines.append("static const uint64_t fc_tv_special_%s[][5] = {" % NAMES[si])
        for i in range(len(x)):
            lines += wrap(["0x%x" % int(o[i]) for o in [x] + outs], open_="{ ", close=" },")
        lines.append("};")
    lines.append("/* checksums of torch's output, [source][destination] (0 on the diagonal) */")
    lines.append("static const uint64_t fc_tv_checksum[4][4] = {")
    for si in range(4):
        x = inputs(si)
        row = []
        for di in range(4):
            row.append(0 if di == si else checksum(torch_cast(x, si, di)))
        lines += wrap(["UINT64_C(0x%016x)" % c for c in row], open_="{ ", close=" },")
    lines.append("};")
    lines.append("/* DTensor boxes: ndim, shape.., mesh ndim, mesh sizes.., shard dims..,")
    lines.append(" * then per rank offsets.., sizes..; -100 ends the table */")
    lines.append("static const int16_t fc_tv_boxes[] = {")
    for shape, mesh, dims in mesh_cases():
        vals = [len(shape), *shape, len(mesh), *mesh, *dims]
        for off, size in torch_boxes(shape, mesh, dims):
            vals += off + size
        lines += wrap([str(v) for v in vals])
    lines.append("    -100,")
    lines.append("};")
    lines.append("/* END GENERATED */")
    return "\n".join(lines) + "\n"


def check_paths():
    """Compare torch's contiguous and strided paths: report NaN-only and numeric diffs."""
    for si in range(4):
        x = inputs(si)
        for di in range(4):
            if si == di:
                continue
            a = torch_cast(x, si, di)
            b = torch_cast(x, si, di, contiguous=True)
            diff = a != b
            src_nan = np.isnan(as_tensor(x, si).double().numpy())
            print("%s->%s: %d differ, %d of them with a non-NaN input" %
                  (NAMES[si], NAMES[di], int(diff.sum()), int((diff & ~src_nan).sum())))


def main():
    if "--check-paths" in sys.argv:
        print("cpu capability:", torch.backends.cpu.get_cpu_capability())
        check_paths()
        return
    block = c_block()
    if "--write" not in sys.argv:
        sys.stdout.write(block)
        return
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "test_kernels_cpu.c")
    with open(path) as f:
        text = f.read()
    pat = re.compile(r"/\* BEGIN GENERATED.*?/\* END GENERATED \*/\n", re.S)
    if not pat.search(text):
        sys.exit("no BEGIN/END GENERATED block in " + path)
    with open(path, "w") as f:
        f.write(pat.sub(lambda m: block, text, count=1))


if __name__ == "__main__":
    main()
