# PATTERN without {}.
gen="python3 $FIXTURES/../tests/cli/layout/moe_st.py"
$gen write moe.safetensors 
fsdpconv full-to-dcp --world-size 2 -o out --unstack '^(.*)\.gate\.weight$=\1.gate' moe.safetensors
rc=$?
test ! -e out || echo "out was written"
exit $rc
