fsdpconv full-to-dcp --world-size 3 -o dcp "$FIXTURES/full/tiny_vitlm_train.pt"
fsdpconv dcp-to-full -o back.pt dcp
fsdpconv diff "$FIXTURES/full/tiny_vitlm_train.pt" back.pt
fsdpconv dcp-to-full --select model --strip-prefix blocks. --dtype bf16 -o small.safetensors dcp
fsdpconv inspect --key '^0\.attn\.qkv' small.safetensors
