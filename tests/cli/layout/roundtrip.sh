# Per-expert MoE -> stacked and fused experts (transformers 5's Mixtral layout) on 4 ranks
# with a tiny --max-memory, checked byte for byte, then back to the per-expert layout.
gen="python3 $FIXTURES/../tests/cli/layout/moe_st.py"
$gen write moe.safetensors
fsdpconv full-to-dcp --world-size 4 -o dcp --max-memory 4K \
    --stack '^(.*)\.block_sparse_moe\.experts\.(\d+)\.(w[13])\.weight$=\1.mlp.experts.\3' \
    --concat '^(.*)\.mlp\.experts\.w1$,\1.mlp.experts.w3=\1.mlp.experts.gate_up_proj:1' \
    --stack '^(.*)\.block_sparse_moe\.experts\.(\d+)\.w2\.weight$=\1.mlp.experts.down_proj' \
    --rename '^(.*)\.block_sparse_moe\.gate\.weight$=\1.mlp.gate.weight' moe.safetensors 2>/dev/null
fsdpconv inspect --key 'layers\.0\.' dcp
fsdpconv dcp-to-full -o stacked.safetensors dcp 2>/dev/null
$gen check stacked.safetensors moe.safetensors
fsdpconv dcp-to-full -o back.safetensors --max-memory 4K \
    --split '^(.*)\.mlp\.experts\.gate_up_proj$=\1.mlp.experts.w1,\1.mlp.experts.w3:1' \
    --unstack '^(.*)\.mlp\.experts\.(w[13])$=\1.block_sparse_moe.experts.{}.\2.weight' \
    --unstack '^(.*)\.mlp\.experts\.down_proj$=\1.block_sparse_moe.experts.{}.w2.weight' \
    --rename '^(.*)\.mlp\.gate\.weight$=\1.block_sparse_moe.gate.weight' dcp 2>/dev/null
fsdpconv diff moe.safetensors back.safetensors
