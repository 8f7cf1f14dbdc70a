#!/bin/sh
# `make demo`: the main job on the bundled example checkpoint - a tiny ViT+LM
# saved with torch.save - converted for 4 FSDP2 ranks with the post-init
# transforms BAGEL-style training applies (conv2d patch embedding -> linear,
# lm_head tied to the embedding, bf16), then inspected and verified.
set -eu
bin="${1:-./fsdpconv}"
out="${DEMO_OUT:-build/demo/tiny_vitlm_dcp}"
mkdir -p "$(dirname "$out")"
echo "== inspect the input"
"$bin" inspect fixtures/full/tiny_vitlm.pt
echo
echo "== convert: 4 ranks, conv2d->linear, tie, bf16"
set -x
"$bin" full-to-dcp --world-size 4 --conv2d-to-linear patch_embed.weight \
    --tie lm_head.weight=embed_tokens.weight --dtype bfloat16 --force \
    -o "$out" fixtures/full/tiny_vitlm.pt
set +x
echo
echo "== inspect and verify the output"
"$bin" inspect --verify "$out"
