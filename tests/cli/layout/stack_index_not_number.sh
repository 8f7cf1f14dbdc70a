# The index group matches a name, not a number.
gen="python3 $FIXTURES/../tests/cli/layout/moe_st.py"
$gen write moe.safetensors 
fsdpconv full-to-dcp --world-size 2 -o out --stack '^(.*)\.experts\.0\.(w\d)\.weight$=\1.w' moe.safetensors
rc=$?
test ! -e out || echo "out was written"
exit $rc
