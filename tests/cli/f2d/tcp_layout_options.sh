# --tcp-layout and --torch-version: what they accept, and one line naming the option otherwise;
# nothing is written on a refusal
in="$FIXTURES/full/tiny_vitlm.pt"
for args in "--tcp-layout zip" "--torch-version 2.10" "--torch-version 3.0" \
        "--torch-version 2" "--torch-version 2.x" "--tcp-layout safetensors --torch-version 2.11"; do
    fsdpconv full-to-dcp --format torch-checkpointing --world-size 2 --drop '^extra\.' $args -o o "$in" 2>&1
    echo "exit $?"
done
fsdpconv full-to-dcp --world-size 2 --drop '^extra\.' --tcp-layout pt -o o "$in" 2>&1
echo "exit $?"
fsdpconv reshard --world-size 2 --torch-version 2.11 -o o "$in" 2>/dev/null
echo "exit $?"
ls
for v in 2.11 2.12 2.13 2.14 2.15 2.16; do
    fsdpconv full-to-dcp --format torch-checkpointing --world-size 2 --drop '^extra\.' -q \
        --torch-version "$v" -o "v$v" "$in" && echo "$v: ok"
done
# the DeviceMesh each pickles: _FlatLayout from 2.13, _preserve_rank_order from 2.15
for v in 2.11 2.12 2.13 2.14 2.15 2.16; do
    grep -q _FlatLayout "v$v/model_0.pt" && flat=_FlatLayout || flat="no _FlatLayout"
    grep -q _preserve_rank_order "v$v/model_0.pt" && keep=_preserve_rank_order || keep="no _preserve_rank_order"
    echo "$v: $flat, $keep"
done
fsdpconv diff v2.11 v2.16 >/dev/null && echo "same tensors"
