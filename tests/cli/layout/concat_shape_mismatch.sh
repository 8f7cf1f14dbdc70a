# w1 [6, 5] and w2 [5, 6] cannot be joined along dim 0 (dim 1 differs).
gen="python3 $FIXTURES/../tests/cli/layout/moe_st.py"
$gen write moe.safetensors 
fsdpconv full-to-dcp --world-size 2 -o out --concat '^(.*)\.w1\.weight$,\1.w2.weight=\1.w12:0' moe.safetensors
rc=$?
test ! -e out || echo "out was written"
exit $rc
