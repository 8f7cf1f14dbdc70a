fsdpconv full-to-dcp --format torch-checkpointing --world-size 2 -o out --optim-select optimizer "$FIXTURES/full/tiny_vitlm_train.pt"
rc=$?
ls  # nothing written
exit $rc
