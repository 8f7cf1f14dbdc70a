fsdpconv full-to-dcp --world-size 2 -o out --copy '^norm\.weight$=norm.bias' "$FIXTURES/full/tiny_vitlm.pt"
ls out* 2>/dev/null
