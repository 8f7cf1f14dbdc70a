# A part tied to another key: the stack would keep one half of the tie.
gen="python3 $FIXTURES/../tests/cli/layout/moe_st.py"
$gen write moe.safetensors 
fsdpconv full-to-dcp --world-size 2 -o out --tie model.layers.0.x=model.layers.0.block_sparse_moe.experts.0.w1.weight --stack '^(.*)\.block_sparse_moe\.experts\.(\d+)\.(w[13])\.weight$=\1.mlp.experts.\3' moe.safetensors
rc=$?
test ! -e out || echo "out was written"
exit $rc
