# Two outputs but three sizes.
fsdpconv full-to-dcp --world-size 2 -o out \
    --split '^(.*)\.qkv\.weight$=\1.a,\1.b:0:8,8,8' "$FIXTURES/safetensors/tiny_vitlm.safetensors"
rc=$?
test ! -e out || echo "out was written"
exit $rc
