# Independent workers (--nproc 3) and array-style shares (--part K/3 in any order, then
# --commit-parts 3) write the same bytes as one process: DCP, safetensors and torch-checkpointing, 1-D, HSDP and TP
# meshes, transforms, optimizer state, zstd items (their offsets come from the share records)
# and rank-local metadata; reshard of a DCP with optimizer state too.
in="$FIXTURES/full/tiny_vitlm_train.pt"
cmd=full-to-dcp
same() { # same NAME: out equals the one-process output moved to NAME.one
    n=0
    for f in "$1.one"/* "$1.one"/.metadata*; do
        [ -e "$f" ] || continue
        cmp "$f" "out/${f#$1.one/}" || exit 1
        n=$((n + 1))
    done
    [ "$(ls -A "$1.one" | wc -l)" = "$(ls -A out | wc -l)" ] || { ls -A out >&2; exit 1; }
    ls -A . | grep -q partial && { ls -A >&2; exit 1; }
    echo "$1: $n files identical"
}
job() { # job NAME ARGS...: one process, --nproc 3, --part 2/3 1/3 0/3 + commit
    name=$1
    shift
    fsdpconv $cmd "$@" -o out "$in" 2>/dev/null && mv out "$name.one" || exit 1
    fsdpconv $cmd --nproc 3 "$@" -o out "$in" 2>/dev/null || exit 1
    same "$name" && rm -rf out
    for k in 2 1 0; do fsdpconv $cmd --part $k/3 "$@" -o out "$in" 2>/dev/null || exit 1; done
    fsdpconv $cmd --commit-parts 3 "$@" -o out "$in" 2>/dev/null || exit 1
    same "$name" && rm -rf out
}
job fsdp --world-size 7 --select model --optim-select optimizer --optim-skip '^vit_pos_embed$' --optim-skip '^temperature$' --conv2d-to-linear patch_embed.weight --dtype bf16
job hsdp --mesh replicate=2,shard=3 --select model --optim-select optimizer --optim-skip '^vit_pos_embed$' --optim-skip '^temperature$' --layout app
job tp --mesh shard=2,tp=2 --select model --tp 'qkv\.(weight|bias)$=0' --tp 'fc2\.weight$=1'
job zstd --world-size 5 --select model --optim-select optimizer --optim-skip '^vit_pos_embed$' --optim-skip '^temperature$' --compress zstd
job ranklocal --mesh replicate=2,shard=2 --select model --metadata rank-local
job st --world-size 5 --select model --format safetensors --rename '^(.*)$=m.\1'
job tcp --mesh replicate=2,shard=2 --select model --format torch-checkpointing --mesh-device cpu
cmd=reshard
in="$FIXTURES/dcp/model_optim_ws2"
job reshard --mesh replicate=2,shard=2
