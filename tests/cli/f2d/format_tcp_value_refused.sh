# non-tensor values have no place in the safetensors layout: refused, nothing written
fsdpconv full-to-dcp --format torch-checkpointing --world-size 2 -o out "$FIXTURES/full/values.pt"
rc=$?
ls  # nothing written
exit $rc
