# The --dtype spellings fc_dtype_parse_user accepts are the ones --help lists,
# and each of them is taken.
for c in full-to-dcp reshard dcp-to-full; do
    fsdpconv help $c | tr -s ' \n' ' ' |
        grep -o 'float32 (fp32, f32, float), bfloat16 (bf16), float16 (fp16, f16, half), float64 (fp64, f64, double)'
done
for d in fp32 f32 float bf16 fp16 f16 half fp64 f64 double; do
    fsdpconv full-to-dcp --dry-run --world-size 1 --dtype $d "$FIXTURES/full/tiny_vitlm.pt" |
        grep "^rule 1  dtype $d " >/dev/null || echo "$d refused"
done
