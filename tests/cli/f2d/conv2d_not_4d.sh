fsdpconv full-to-dcp --world-size 2 --conv2d-to-linear patch_embed.bias -o out "$FIXTURES/full/tiny_vitlm.pt"
