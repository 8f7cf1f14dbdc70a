fsdpconv full-to-dcp --world-size 2 -o out --resize-rows temperature=4 "$FIXTURES/full/tiny_vitlm.pt"
