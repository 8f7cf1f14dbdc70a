# The last expert's w2 is [6, 5], the others' [5, 6].
gen="python3 $FIXTURES/../tests/cli/layout/moe_st.py"
$gen write moe.safetensors --w2 6x5
fsdpconv full-to-dcp --world-size 2 -o out --stack '^(.*)\.experts\.(\d+)\.w2\.weight$=\1.down_proj' moe.safetensors
rc=$?
test ! -e out || echo "out was written"
exit $rc
