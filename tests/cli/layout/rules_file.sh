# The layout rules from a --rules file (full-to-dcp), one a line as the flags spell them;
# back with a split of explicit sizes and negative dims.
gen="python3 $FIXTURES/../tests/cli/layout/moe_st.py"
$gen write moe.safetensors --layers 1
cat > in.rules <<'R'
# per-expert -> stacked, fused (transformers 5 Mixtral)
stack ^(.*)\.block_sparse_moe\.experts\.(\d+)\.(w[13])\.weight$=\1.mlp.experts.\3
concat ^(.*)\.mlp\.experts\.w1$,\1.mlp.experts.w3=\1.mlp.experts.gate_up_proj:-2
stack ^(.*)\.block_sparse_moe\.experts\.(\d+)\.w2\.weight$=\1.mlp.experts.down_proj
R
fsdpconv full-to-dcp --world-size 2 -o dcp --rules in.rules moe.safetensors 2>/dev/null
fsdpconv inspect dcp | grep -c 'float32 \[4, '
fsdpconv dcp-to-full -o back.safetensors \
    --split '^(.*)\.mlp\.experts\.gate_up_proj$=\1.w1s,\1.w3s:-2:6,6' \
    --unstack '^(.*)\.(w[13])s$=\1.block_sparse_moe.experts.{}.\2.weight' \
    --unstack '^(.*)\.mlp\.experts\.down_proj$=\1.block_sparse_moe.experts.{}.w2.weight' \
    dcp 2>/dev/null
fsdpconv diff moe.safetensors back.safetensors
