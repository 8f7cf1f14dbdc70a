# Unstacking the 0-d slices of an unstacked 1-D tensor.
gen="python3 $FIXTURES/../tests/cli/layout/moe_st.py"
$gen write moe.safetensors 
fsdpconv full-to-dcp --world-size 2 -o out --unstack '^(.*)\.gate\.weight$=\1.gate.{}' --unstack '^(.*)\.gate\.0$=\1.g0.{}' --unstack '^(.*)\.g0\.0$=\1.g00.{}' moe.safetensors
rc=$?
test ! -e out || echo "out was written"
exit $rc
