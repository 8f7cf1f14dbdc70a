# Every box read fills its whole buffer.  With malloc filling fresh memory with 0xa5 or 0x5a
# (MALLOC_PERTURB_), chunked sources that tile (FSDP rows with empty shards, rank-local
# replicas, a TP x FSDP grid, per-rank safetensors) export to identical bytes, equal to the
# input; checkpoints whose chunk counts add up over an overlap and a gap are refused (exit 3,
# nothing written), where a counting check exported the unwritten bytes.
in="$FIXTURES/full/tiny_vitlm.pt"
fsdpconv full-to-dcp --mesh shard=2,tp=2 --tp 'fc2\.weight$=1' -o grid "$in" >/dev/null || exit 1
fsdpconv full-to-dcp --format safetensors --world-size 5 -o st5 "$in" >/dev/null || exit 1
for src in "$FIXTURES/dcp/model_optim_ws2" "$FIXTURES/dcp/ranklocal_ws2" "$FIXTURES/dcp_train/plain" \
    grid st5; do
    for p in 165 90; do
        mkdir p$p
        MALLOC_PERTURB_=$p fsdpconv dcp-to-full -o p$p/full.pt "$src" || echo "dcp-to-full failed"
        MALLOC_PERTURB_=$p fsdpconv reshard --world-size 3 -o p$p/re "$src" >/dev/null || echo "reshard failed"
        MALLOC_PERTURB_=$p fsdpconv dcp-to-full -o p$p/back.pt p$p/re || echo "dcp-to-full failed"
    done
    cmp p165/full.pt p90/full.pt && cmp p165/back.pt p90/back.pt &&
        fsdpconv diff -q p165/full.pt p90/back.pt && echo "$(basename "$src"): same bytes"
    rm -rf p165 p90
done
fsdpconv diff -q grid "$in" && fsdpconv diff -q st5 "$in" && echo "grid, st5: equal to the input"
python3 "$FIXTURES/../tests/hostile/gen.py" "$FIXTURES" cases
for c in st_ranks_overlap_gap_1d st_ranks_overlap_gap_2d dcp_overlap_gap_1d dcp_overlap_gap_2d \
    dcp_ranklocal_overlap_gap; do
    MALLOC_PERTURB_=165 fsdpconv dcp-to-full -o out.safetensors cases/$c/in 2>err
    echo "exit $?: $(sed 's/^.*in: //' err)"
done
ls -A | grep -v -e cases -e grid -e st5 -e err
exit 0
