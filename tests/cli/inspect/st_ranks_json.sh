# --json of a per-rank safetensors directory has DCP's fields: chunks, files, coverage, version.
fsdpconv full-to-dcp --world-size 3 --format safetensors -o st "$FIXTURES/full/tiny_vitlm.pt" &&
    fsdpconv inspect --json --key '^(step_count|blocks\.1\.mlp\.fc\d\.weight)$' st
