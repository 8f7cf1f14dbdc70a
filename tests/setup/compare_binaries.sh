#!/bin/sh
# Behaviour must not change under a refactor: run two fsdpconv binaries on the same jobs
# (every fixture, every output kind, every mesh kind, transforms, optimizer state, inspect
# --json and --dry-run plans) and compare what they write byte for byte: each output file, the
# stdout of inspect/dry-run, and the exit status.  The summary line's seconds are the only
# thing masked.  Usage: compare_binaries.sh OLD_FSDPCONV NEW_FSDPCONV
# (build the old one from a worktree of the commit you start from:
#  git worktree add /tmp/fc-old HEAD && make -C /tmp/fc-old all).
set -u
if [ $# -ne 2 ]; then
    echo "usage: $0 OLD_FSDPCONV NEW_FSDPCONV" >&2
    exit 2
fi
old=$1
new=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
fx="$root/fixtures"
work=$(mktemp -d /tmp/fc_compare.XXXXXX)
trap 'rm -rf "$work"' EXIT
n=0
bad=0
failed=""

# job NAME ARGS...: run ARGS with each binary in its own directory ("OUT" is the output path);
# outputs, stdout, stderr (seconds masked) and exit status must match.
job() {
    name=$1
    shift
    for side in old new; do
        d="$work/$side/$name"
        mkdir -p "$d"
        if [ "$side" = old ]; then bin=$old; else bin=$new; fi
        (
            cd "$d" || exit 99
            "$bin" "$@" >stdout 2>stderr_raw
            echo $? >status
            sed -e 's/, [0-9.]* s$/, S s/' -e 's/partial-[0-9]*-[0-9a-f]*/partial-P/g' \
                stderr_raw >stderr
            rm -f stderr_raw
        )
    done
    n=$((n + 1))
    [ "$(cat "$work/new/$name/status")" = 0 ] || failed="$failed $name($(cat "$work/new/$name/status"))"
    if ! diff -r "$work/old/$name" "$work/new/$name" >"$work/diff" 2>&1; then
        bad=$((bad + 1))
        echo "DIFFERS $name: $(head -c 400 "$work/diff" | tr '\n' ' ')"
    fi
}

st="$fx/safetensors/tiny_vitlm.safetensors"
pt="$fx/full/tiny_vitlm.pt"
train="$fx/full/tiny_vitlm_train.pt"
tp_rules="--tp qkv\.(weight|bias)\$=0 --tp fc2\.weight\$=1"

# full-to-dcp: every full fixture, DCP and safetensors, every mesh kind
for f in "$fx"/full/*.pt "$fx"/safetensors/*.safetensors "$fx/safetensors/sharded"; do
    b=$(basename "$f")
    job "f2d-ws3-$b" full-to-dcp --world-size 3 -o OUT "$f"
    job "f2d-dry-$b" full-to-dcp --world-size 3 --dry-run "$f"
    job "inspect-$b" inspect --json "$f"
done
for f in "$pt" "$st"; do
    b=$(basename "$f")
    job "f2d-hsdp-$b" full-to-dcp --mesh replicate=2,shard=2 -o OUT "$f"
    # shellcheck disable=SC2086
    job "f2d-tp-$b" full-to-dcp --mesh shard=2,tp=2 $tp_rules -o OUT "$f"
    # shellcheck disable=SC2086
    job "f2d-hsdp-tp-$b" full-to-dcp --mesh replicate=2,shard=2,tp=2 $tp_rules -o OUT "$f"
    job "f2d-st-$b" full-to-dcp --world-size 3 --format safetensors -o OUT "$f"
    job "f2d-zstd-$b" full-to-dcp --world-size 2 --compress zstd:3 -o OUT "$f"
    job "f2d-bf16-$b" full-to-dcp --world-size 2 --dtype bf16 -o OUT "$f"
    job "f2d-xform-$b" full-to-dcp --world-size 2 --conv2d-to-linear patch_embed.weight \
        --rename '^blocks\.(\d+)\.=layers.\1.' --copy '^norm\.(.*)$=ema.norm.\1' \
        --resize-rows 'vit_pos_embed=6:mean' --replicate '^logit_scale$' -o OUT "$f"
    job "f2d-threads1-$b" full-to-dcp --world-size 4 --threads 1 --max-memory 4KiB -o OUT "$f"
done
job "f2d-optim" full-to-dcp --world-size 2 --select model --optim-select optimizer \
    --optim-skip '^vit_pos_embed$' --optim-skip '^temperature$' -o OUT "$train"
job "f2d-optim-app" full-to-dcp --world-size 2 --select model --optim-select optimizer \
    --optim-skip '^vit_pos_embed$' --optim-skip '^temperature$' --layout app -o OUT "$train"
job "f2d-two-inputs" full-to-dcp --world-size 2 "a=$pt" "b=$st" -o OUT
job "f2d-nproc2" full-to-dcp --world-size 4 --nproc 2 -o OUT "$pt"

# reshard, dcp-to-full and inspect of every DCP fixture
for f in "$fx"/dcp/*/ "$fx"/dcp_train/plain "$fx"/dcp_train/zstd; do
    [ -e "$f/.metadata" ] || [ -n "$(ls "$f"/__*.metadata 2>/dev/null)" ] || continue
    b=$(basename "$f")
    job "inspect-$b" inspect --json "$f"
    job "inspect-verify-$b" inspect --verify --checksum "$f"
    job "reshard-ws3-$b" reshard --world-size 3 -o OUT "$f"
    job "reshard-hsdp-$b" reshard --mesh replicate=2,shard=2 -o OUT "$f"
    job "reshard-st-$b" reshard --world-size 2 --format safetensors -o OUT "$f"
    job "d2f-pt-$b" dcp-to-full -o OUT.pt "$f"
    job "d2f-st-$b" dcp-to-full -o OUT.safetensors "$f"
    job "d2f-dir-$b" dcp-to-full --max-shard-size 1K -o OUT "$f"
    job "diff-$b" diff "$f" "$f"
done
echo "compare: $n jobs, $bad differ; jobs that fail alike on purpose or not:${failed:- none}"
[ "$bad" -eq 0 ]
