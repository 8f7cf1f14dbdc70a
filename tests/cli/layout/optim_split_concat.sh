# State follows a split and a concat of its splits (virtual tensors of virtual tensors): QKV cut
# into q, k, v and joined again, with AdamW state, equals the checkpoint converted as it is.
in=$FIXTURES/full/tiny_vitlm_train.pt
skip="--optim-skip ^vit_pos_embed$ --optim-skip ^temperature$"
fsdpconv full-to-dcp -q --world-size 2 --max-memory 4K --select model --optim-select optimizer \
    $skip -o got \
    --split '^(blocks\.\d+\.attn)\.qkv\.weight$=\1.q.weight,\1.k.weight,\1.v.weight:0' \
    --concat '^(blocks\.\d+\.attn)\.q\.weight$,\1.k.weight,\1.v.weight=\1.qkv.weight:0' \
    "$in" || exit 1
fsdpconv full-to-dcp -q --world-size 2 --select model --optim-select optimizer $skip -o want \
    "$in" || exit 1
fsdpconv diff got want
