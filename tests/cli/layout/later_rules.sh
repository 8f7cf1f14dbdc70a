# Rules after a stack treat its output as any tensor: renamed, tied (stored once), copied and
# resized; the DCP then holds the same bytes under both tied names.
gen="python3 $FIXTURES/../tests/cli/layout/moe_st.py"
$gen write moe.safetensors --layers 1
fsdpconv full-to-dcp --world-size 2 -o out \
    --stack '^(.*)\.block_sparse_moe\.experts\.(\d+)\.w2\.weight$=\1.w2s' \
    --rename '^(.*)\.w2s$=\1.down_proj' \
    --tie model.layers.0.down_proj_tied=model.layers.0.down_proj \
    --copy '^(.*)\.down_proj$=\1.down_copy' \
    --resize-rows model.layers.0.down_copy=6:zero moe.safetensors 2>/dev/null
fsdpconv inspect --checksum --key 'down' out | sed -n '/^model/p;/^FILES/q'
fsdpconv full-to-dcp --world-size 2 -o plan --dry-run \
    --stack '^(.*)\.block_sparse_moe\.experts\.(\d+)\.w2\.weight$=\1.w2s' \
    --tie model.layers.0.t=model.layers.0.w2s moe.safetensors | grep -A1 '^tensor model\.layers\.0\.t '
