# reshard --metadata rank-local: the resharded DCP gets one __{r}.metadata per rank.
fsdpconv full-to-dcp --world-size 3 -o in "$FIXTURES/full/tiny_vitlm.pt" 2>/dev/null
fsdpconv reshard --world-size 2 --metadata rank-local -o out in 2>/dev/null
ls -A out
fsdpconv diff in out
