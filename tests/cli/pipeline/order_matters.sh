# Rules run in the order given: the rename sees copies made before it, not those made after.
pt="$FIXTURES/full/tiny_vitlm.pt"
fsdpconv full-to-dcp --dry-run --world-size 2 --copy '^norm\.(\w+)$=norm_moe_gen.\1' \
    --rename '^norm_(moe_gen)\.=final_\1.' "$pt" | grep -E '^(pipeline|rule|tensor (final|norm))'
fsdpconv full-to-dcp --dry-run --world-size 2 --rename '^norm_(moe_gen)\.=final_\1.' \
    --copy '^norm\.(\w+)$=norm_moe_gen.\1' "$pt"
