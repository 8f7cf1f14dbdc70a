fsdpconv full-to-dcp --world-size 2 -o out --layout titan "$FIXTURES/full/tiny_vitlm.pt"
rc=$?
test ! -e out && exit $rc
