# Expert 1 twice (experts.1 and experts.01): one index, two keys.
gen="python3 $FIXTURES/../tests/cli/layout/moe_st.py"
$gen write moe.safetensors --experts 0,1,01,2
fsdpconv full-to-dcp --world-size 2 -o out --stack '^(.*)\.block_sparse_moe\.experts\.(\d+)\.(w[13])\.weight$=\1.mlp.experts.\3' moe.safetensors
rc=$?
test ! -e out || echo "out was written"
exit $rc
