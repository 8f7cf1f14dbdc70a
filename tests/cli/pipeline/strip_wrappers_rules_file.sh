# Wrapper names from FSDP1, activation checkpointing, torch.compile and DDP, cleaned from a rules
# file that runs where --rules stands (after the prefix rename, before the drop).
cat > rules.txt <<'R'
strip-wrappers
drop ^extra\.      # the dtype variants
R
fsdpconv full-to-dcp --dry-run --world-size 2 --rules rules.txt \
    module._fsdp_wrapped_module._orig_mod.="$FIXTURES/full/tiny_vitlm.pt" | grep -c '^tensor [a-z]'
fsdpconv full-to-dcp --dry-run --world-size 2 --rules rules.txt \
    module._fsdp_wrapped_module._orig_mod.="$FIXTURES/full/tiny_vitlm.pt" | grep -E '^tensor (norm|blocks\.0\.attn\.proj)'
