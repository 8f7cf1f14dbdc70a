# Safetensors files carry their own headers: there is no metadata to make rank-local.
fsdpconv full-to-dcp --format safetensors --metadata rank-local --world-size 2 -o out \
    "$FIXTURES/full/tiny_vitlm.pt"
rc=$?
test ! -e out && exit $rc
