# -q and -v are taken after the command name as well as before it
fsdpconv full-to-dcp -q --world-size 2 -o out "$FIXTURES/full/tiny_vitlm.pt" &&
fsdpconv -q full-to-dcp --world-size 2 -o out2 "$FIXTURES/full/tiny_vitlm.pt" &&
fsdpconv inspect -v out >/dev/null && cmp out/__1_0.distcp out2/__1_0.distcp && echo same
