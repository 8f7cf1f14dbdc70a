fsdpconv full-to-dcp --world-size 4 --tp 'weight$=0' --dry-run "$FIXTURES/full/tiny_vitlm.pt"
