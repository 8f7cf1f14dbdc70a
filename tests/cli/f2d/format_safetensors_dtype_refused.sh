fsdpconv full-to-dcp --format safetensors --world-size 2 -o out "$FIXTURES/full/dtypes.pt"
rc=$?
ls
exit $rc
