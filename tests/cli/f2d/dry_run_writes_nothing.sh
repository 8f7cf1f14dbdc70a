fsdpconv full-to-dcp --dry-run --world-size 2 -o out "$FIXTURES/full/tiny_vitlm.pt" > /dev/null
ls -A
