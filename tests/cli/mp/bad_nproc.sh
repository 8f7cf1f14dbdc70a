fsdpconv full-to-dcp --nproc 0 --world-size 2 -o out "$FIXTURES/full/tiny_vitlm.pt"
