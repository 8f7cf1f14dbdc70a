# A --dtype before the stack is carried through it (casts commute): the same bytes as one
# after it.  World size 3 cuts 4 experts 2/1/1, so a rank's box holds two slices, read in
# one slab through the concat's scratch rows; a --resize-rows after the stack works too.
gen="python3 $FIXTURES/../tests/cli/layout/moe_st.py"
$gen write moe.safetensors
st='^(.*)\.block_sparse_moe\.experts\.(\d+)\.(w[13])\.weight$=\1.mlp.experts.\3'
cat='^(.*)\.mlp\.experts\.w1$,\1.mlp.experts.w3=\1.mlp.experts.gate_up_proj:1'
fsdpconv full-to-dcp --world-size 3 -o a --dtype bf16 --stack "$st" --concat "$cat" \
    --resize-rows model.layers.1.mlp.experts.gate_up_proj=6:zero moe.safetensors 2>/dev/null
fsdpconv full-to-dcp --world-size 3 -o b --stack "$st" --concat "$cat" --dtype bf16 \
    --resize-rows model.layers.1.mlp.experts.gate_up_proj=6:zero moe.safetensors 2>/dev/null
fsdpconv diff a b
fsdpconv inspect --key 'layers\.1\.mlp\.experts\.gate_up' a
fsdpconv dcp-to-full -o a.safetensors --dtype fp32 \
    --resize-rows model.layers.1.mlp.experts.gate_up_proj=4 a 2>/dev/null
fsdpconv full-to-dcp --world-size 1 -o one moe.safetensors 2>/dev/null
fsdpconv dcp-to-full -o ref.safetensors --stack "$st" --concat "$cat" --dtype bf16 --dtype fp32 \
    one 2>/dev/null
fsdpconv diff a.safetensors ref.safetensors
