# --metadata rank-local: __{r}.metadata per rank and no .metadata.  Each rank's file,
# inspected alone beside the data files (so it covers only that rank's part), lists every
# key but only the box that rank holds: replica ranks 2 and 3 hold ranks 0 and 1's boxes,
# each stored once, in whichever file the plan put it.
fsdpconv full-to-dcp --mesh replicate=2,shard=2 --metadata rank-local --compress zstd \
    -o out "$FIXTURES/full/tiny_vitlm.pt" 2>/dev/null
ls -A out
for r in 0 1 2 3; do
    mkdir only$r
    cp out/__${r}.metadata out/*.distcp only$r/
    fsdpconv inspect --key '^(modality_embed|temperature)$' only$r 2>/dev/null | sed -n '2,5p'
done
fsdpconv diff "$FIXTURES/full/tiny_vitlm.pt" out
