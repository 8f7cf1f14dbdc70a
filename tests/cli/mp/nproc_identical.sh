# --nproc 3 (independent workers, each reading and writing the rank files it owns)
# gives byte-identical output to one process, for full-to-dcp and reshard.
in="$FIXTURES/full/tiny_vitlm_train.pt"
fsdpconv full-to-dcp --world-size 7 --dtype bf16 --select model -o out "$in" && mv out one
fsdpconv full-to-dcp --nproc 3 --world-size 7 --dtype bf16 --select model -o out "$in" || exit 1
for f in one/.metadata one/*.distcp; do cmp "$f" "out/${f#one/}" || exit 1; done
ls -A out | wc -l
fsdpconv reshard --world-size 5 -o r "$FIXTURES/dcp/model_optim_ws2" && mv r r_one
fsdpconv reshard --nproc 2 --world-size 5 -o r "$FIXTURES/dcp/model_optim_ws2" || exit 1
for f in r_one/.metadata r_one/*.distcp; do cmp "$f" "r/${f#r_one/}" || exit 1; done
echo identical
