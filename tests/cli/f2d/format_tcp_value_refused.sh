# non-tensor values: fsdpconv writes none into torch-checkpointing files: refused, nothing written
fsdpconv full-to-dcp --format torch-checkpointing --world-size 2 -o out "$FIXTURES/full/values.pt"
rc=$?
ls  # nothing written
exit $rc
