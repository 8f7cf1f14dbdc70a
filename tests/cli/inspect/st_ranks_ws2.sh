# A per-rank safetensors directory (full-to-dcp --format safetensors) is shown as a DCP is:
# chunks with offsets, sizes, file and byte range, FILES, and the coverage check.
fsdpconv full-to-dcp --world-size 2 --format safetensors -o st "$FIXTURES/full/tiny_vitlm.pt" &&
    fsdpconv inspect --checksum st
