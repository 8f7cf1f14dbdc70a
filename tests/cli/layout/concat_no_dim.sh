# A concat without its :DIM.
fsdpconv full-to-dcp --world-size 2 -o out \
    --concat '^(.*)\.q\.weight$,\1.k.weight=\1.qk.weight' "$FIXTURES/safetensors/tiny_vitlm.safetensors"
rc=$?
test ! -e out || echo "out was written"
exit $rc
