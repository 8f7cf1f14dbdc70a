fsdpconv full-to-dcp --world-size 2 --layout app --add-prefix model. -o out "$FIXTURES/full/tiny_vitlm.pt"
