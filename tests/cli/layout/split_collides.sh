# A split whose output is a key that exists.
gen="python3 $FIXTURES/../tests/cli/layout/moe_st.py"
$gen write moe.safetensors 
fsdpconv full-to-dcp --world-size 2 -o out --split '^(.*)\.experts\.0\.w1\.weight$=\1.experts.0.w3.weight,\1.b:0' moe.safetensors
rc=$?
test ! -e out || echo "out was written"
exit $rc
