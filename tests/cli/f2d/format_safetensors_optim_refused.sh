fsdpconv full-to-dcp --format safetensors --world-size 2 -o out --optim-select optimizer "$FIXTURES/full/tiny_vitlm_train.pt"
