# a missing value is told apart from an unknown option
fsdpconv full-to-dcp -o out "$FIXTURES/full/tiny_vitlm.pt" --world-size
