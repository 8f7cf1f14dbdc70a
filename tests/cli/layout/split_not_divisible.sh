# 6 rows do not split into 4 equal parts.
gen="python3 $FIXTURES/../tests/cli/layout/moe_st.py"
$gen write moe.safetensors 
fsdpconv full-to-dcp --world-size 2 -o out --split '^(.*)\.w1\.weight$=\1.a,\1.b,\1.c,\1.d:0' moe.safetensors
rc=$?
test ! -e out || echo "out was written"
exit $rc
