# The partner key the template names is not there.
gen="python3 $FIXTURES/../tests/cli/layout/moe_st.py"
$gen write moe.safetensors 
fsdpconv full-to-dcp --world-size 2 -o out --concat '^(.*)\.w1\.weight$,\1.w4.weight=\1.w14:0' moe.safetensors
rc=$?
test ! -e out || echo "out was written"
exit $rc
