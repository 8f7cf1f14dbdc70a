# Without --optim-skip the frozen vit_pos_embed takes parameter id 0: shapes disagree.
fsdpconv full-to-dcp --world-size 2 --select model --optim-select optimizer -o out "$FIXTURES/full/tiny_vitlm_train.pt"
