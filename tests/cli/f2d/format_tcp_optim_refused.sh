# the safetensors layout holds no param_groups: optimizer state is refused, nothing written
fsdpconv full-to-dcp --format torch-checkpointing --tcp-layout safetensors --world-size 2 -o out --optim-select optimizer "$FIXTURES/full/tiny_vitlm_train.pt"
rc=$?
ls  # nothing written
exit $rc
