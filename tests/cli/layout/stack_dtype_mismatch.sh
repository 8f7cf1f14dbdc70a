# One expert's w1 is bfloat16, the others' float32.
gen="python3 $FIXTURES/../tests/cli/layout/moe_st.py"
$gen write moe.safetensors --dtype-of model.layers.1.block_sparse_moe.experts.2.w1.weight=bf16
fsdpconv full-to-dcp --world-size 2 -o out --stack '^(.*)\.block_sparse_moe\.experts\.(\d+)\.(w[13])\.weight$=\1.mlp.experts.\3' moe.safetensors
rc=$?
test ! -e out || echo "out was written"
exit $rc
