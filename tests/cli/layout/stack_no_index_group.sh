# DST uses every group: no index to order the keys by.
gen="python3 $FIXTURES/../tests/cli/layout/moe_st.py"
$gen write moe.safetensors 
fsdpconv full-to-dcp --world-size 2 -o out --stack '^(.*)\.experts\.(\d+)\.w1\.weight$=\1.\2.w1' moe.safetensors
rc=$?
test ! -e out || echo "out was written"
exit $rc
