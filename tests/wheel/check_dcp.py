"""`make test-wheel`: PyTorch loads the DCP the installed wheel's fsdpconv wrote, bit-exactly.

usage: check_dcp.py FIXTURE DCP_DIR...   (the demo conversion: 4 ranks, conv2d->linear, tie, bf16)

The expected state dict is built in PyTorch from the fixture (f2d_reference.reference, the
interop tests' reference). torch's FileSystemReader must list exactly its keys, each with its
dtype and shape (dcp.load would cast a wrong dtype silently) and the Shard(0) chunk boxes of 4
ranks; dcp.load(no_dist=True) into poisoned tensors (every element wrong) must then yield it
bit for bit.
"""

import os
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "interop"))

import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402

import f2d_reference as ref  # noqa: E402


def check(out, expected):
    stored = dcp.FileSystemReader(out).read_metadata().state_dict_metadata
    problems = []
    if set(stored) != set(expected):
        problems.append("keys: missing %s, unexpected %s" % (
            sorted(set(expected) - set(stored)), sorted(set(stored) - set(expected))))
    for k in sorted(set(stored) & set(expected)):
        md, want = stored[k], expected[k]
        boxes = {(tuple(c.offsets), tuple(c.sizes)) for c in md.chunks if all(c.sizes)}
        if md.properties.dtype != want.dtype or tuple(md.size) != tuple(want.shape):
            problems.append("%s: stored %s %s, want %s %s" % (
                k, md.properties.dtype, list(md.size), want.dtype, list(want.shape)))
        elif boxes != ref.expected_boxes(want.shape, 4, False):
            problems.append("%s: chunks %s, want the Shard(0) boxes of 4 ranks" % (k, boxes))
    target = {k: ref.poisoned(v) for k, v in expected.items()}
    with warnings.catch_warnings():  # "torch.distributed is disabled": no_dist is the point
        warnings.simplefilter("ignore", UserWarning)
        dcp.load(target, checkpoint_id=out, no_dist=True)
    problems += ["%s: %s" % (k, d) for k in sorted(expected)
                 for d in [ref.diff(target[k], expected[k])] if d]
    for p in problems:
        print("wheel: dcp.load of %s: %s" % (out, p), file=sys.stderr)
    return not problems


def main():
    fixture, outs = sys.argv[1], sys.argv[2:]
    expected = ref.reference(ref.load_input(fixture), conv=["patch_embed.weight"],
                             ties=[("lm_head.weight", "embed_tokens.weight")],
                             dtype=torch.bfloat16)
    if not all([check(out, expected) for out in outs]):
        sys.exit(1)
    print("wheel: torch %s dcp.load of %d DCPs: %d tensors each, bit-exact" % (
        torch.__version__, len(outs), len(expected)))


if __name__ == "__main__":
    main()
