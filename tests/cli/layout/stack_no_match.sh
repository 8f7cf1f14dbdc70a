# A regex that matches nothing.
gen="python3 $FIXTURES/../tests/cli/layout/moe_st.py"
$gen write moe.safetensors 
fsdpconv full-to-dcp --world-size 2 -o out --stack '^(.*)\.expert\.(\d+)\.w1\.weight$=\1.w1s' moe.safetensors
rc=$?
test ! -e out || echo "out was written"
exit $rc
