# The options of the op rules come from convert/ops.c's table: each command lists those of
# its scope (conv2d-to-linear only where full checkpoints are read), takes them in the
# synopsis and as flags, and refuses the others as unknown options.
for c in full-to-dcp reshard dcp-to-full; do
    printf '%s:' "$c"
    fsdpconv help $c | sed -n -E 's/^    --(conv2d-to-linear|resize-rows|dtype) .*/ \1/p' | tr -d '\n'
    n=$(fsdpconv help $c | tr -s ' \n' ' ' | grep -c '\[--resize-rows <key>=<n>\[:zero|mean\]\]\.\.\.')
    echo "; in the synopsis: $n"
done
fsdpconv full-to-dcp --dry-run --world-size 1 --conv2d-to-linear patch_embed.weight \
    --resize-rows 'vit_pos_embed=6' "$FIXTURES/full/tiny_vitlm.pt" | grep '^rule [0-9]'
fsdpconv reshard --world-size 1 --conv2d-to-linear patch_embed.weight -o out ckpt
echo "exit $?"
