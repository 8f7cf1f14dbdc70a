# Dim 2 of a 2-D tensor.
gen="python3 $FIXTURES/../tests/cli/layout/moe_st.py"
$gen write moe.safetensors 
fsdpconv full-to-dcp --world-size 2 -o out --concat '^(.*)\.w1\.weight$,\1.w3.weight=\1.w13:2' moe.safetensors
rc=$?
test ! -e out || echo "out was written"
exit $rc
