fsdpconv full-to-dcp --world-size 2 --tie lm_head.weight=no.such.key -o out "$FIXTURES/full/tiny_vitlm.pt"
