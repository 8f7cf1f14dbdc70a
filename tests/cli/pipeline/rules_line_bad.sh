printf 'drop ^extra\\.\ncopy ^norm\\.weight$\n' > rules.txt
fsdpconv full-to-dcp --world-size 2 -o out --rules rules.txt "$FIXTURES/full/tiny_vitlm.pt"
