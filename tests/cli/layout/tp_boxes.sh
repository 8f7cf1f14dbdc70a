# Tensor parallelism cuts the fused experts on dim 1, across the w1/w3 seam of the concat, and
# on dim 2: each rank's box reads the parts it overlaps; exported back, the input's bytes.
gen="python3 $FIXTURES/../tests/cli/layout/moe_st.py"
$gen write moe.safetensors --layers 1 --experts 0,1,2
fsdpconv full-to-dcp --mesh shard=2,tp=3 -o dcp --max-memory 4K \
    --tp 'gate_up_proj$=1' --tp 'down_proj$=2' \
    --stack '^(.*)\.block_sparse_moe\.experts\.(\d+)\.(w[13])\.weight$=\1.mlp.experts.\3' \
    --concat '^(.*)\.mlp\.experts\.w1$,\1.mlp.experts.w3=\1.mlp.experts.gate_up_proj:1' \
    --stack '^(.*)\.block_sparse_moe\.experts\.(\d+)\.w2\.weight$=\1.mlp.experts.down_proj' \
    moe.safetensors 2>/dev/null
fsdpconv inspect --key 'experts' dcp | grep -c 'offsets'
fsdpconv dcp-to-full -o back.safetensors \
    --split '^(.*)\.mlp\.experts\.gate_up_proj$=\1.mlp.experts.w1,\1.mlp.experts.w3:1' \
    --unstack '^(.*)\.mlp\.experts\.(w[13])$=\1.block_sparse_moe.experts.{}.\2.weight' \
    --unstack '^(.*)\.mlp\.experts\.down_proj$=\1.block_sparse_moe.experts.{}.w2.weight' \
    dcp 2>/dev/null
fsdpconv diff moe.safetensors back.safetensors
