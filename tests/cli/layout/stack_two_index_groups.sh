# DST leaves two groups out: which one is the index is not clear.
gen="python3 $FIXTURES/../tests/cli/layout/moe_st.py"
$gen write moe.safetensors 
fsdpconv full-to-dcp --world-size 2 -o out --stack '^(.*)\.experts\.(\d+)\.(w1)\.weight$=\1.w1s' moe.safetensors
rc=$?
test ! -e out || echo "out was written"
exit $rc
