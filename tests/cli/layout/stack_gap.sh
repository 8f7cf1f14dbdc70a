# Experts 0, 1, 3: index 2 is missing; exit 2 naming the rule and the keys, nothing written.
gen="python3 $FIXTURES/../tests/cli/layout/moe_st.py"
$gen write moe.safetensors --experts 0,1,3
fsdpconv full-to-dcp --world-size 2 -o out --stack '^(.*)\.block_sparse_moe\.experts\.(\d+)\.(w[13])\.weight$=\1.mlp.experts.\3' moe.safetensors
rc=$?
test ! -e out || echo "out was written"
exit $rc
