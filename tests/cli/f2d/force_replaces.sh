fsdpconv full-to-dcp --world-size 2 -o out "$FIXTURES/full/tiny_vitlm.pt"
fsdpconv full-to-dcp --world-size 3 --force -o out "$FIXTURES/full/tiny_vitlm.pt"
ls -A out
ls -A
