# A --resize-rows before the stack: it must come after.
gen="python3 $FIXTURES/../tests/cli/layout/moe_st.py"
$gen write moe.safetensors 
fsdpconv full-to-dcp --world-size 2 -o out --resize-rows model.layers.0.block_sparse_moe.experts.0.w1.weight=8:zero --stack '^(.*)\.block_sparse_moe\.experts\.(\d+)\.(w[13])\.weight$=\1.mlp.experts.\3' moe.safetensors
rc=$?
test ! -e out || echo "out was written"
exit $rc
