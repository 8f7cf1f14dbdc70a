# Sizes 2 and 3 do not add up to the 6 rows.
gen="python3 $FIXTURES/../tests/cli/layout/moe_st.py"
$gen write moe.safetensors 
fsdpconv full-to-dcp --world-size 2 -o out --split '^(.*)\.w1\.weight$=\1.a,\1.b:0:2,3' moe.safetensors
rc=$?
test ! -e out || echo "out was written"
exit $rc
