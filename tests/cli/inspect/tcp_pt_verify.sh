# --format torch-checkpointing's default layout: model_<rank>.pt archives of FSDP2's padded
# storages, written in row slabs by several threads; inspect --verify checks every record's
# CRC-32, the padding rows included, and names the record a flipped padding byte breaks
in="$FIXTURES/full/tiny_vitlm.pt"
fsdpconv full-to-dcp --format torch-checkpointing --world-size 3 --drop '^extra\.' \
    --max-memory 64KiB --threads 2 -q -o t "$in"
ls t
fsdpconv inspect --verify t >/dev/null && echo "verified"
fsdpconv diff t t >/dev/null && echo "reads back"
# the first padding byte of rank 2: right after a chunk shorter than rank 0's of the same tensor
pad=$(fsdpconv inspect t | awk '
    /^[^ ]/ { len0 = -1 }
    / model_0\.pt / { s = $NF; sub(/^\+/, "", s); sub(/\)$/, "", s); len0 = s + 0 }
    / model_2\.pt / { o = $(NF - 1); sub(/^\[/, "", o); sub(/,$/, "", o)
                      s = $NF; sub(/^\+/, "", s); sub(/\)$/, "", s)
                      if (s + 0 < len0) { print o + s; exit } }')
[ -n "$pad" ] && echo "rank 2 has padding rows"
printf '\001' | dd of=t/model_2.pt bs=1 seek="$pad" conv=notrunc 2>/dev/null
fsdpconv inspect --verify t >/dev/null 2>err
echo "exit $?"
sed 's/CRC-32 is 0x[0-9a-f]*, the central directory says 0x[0-9a-f]*/CRC-32 differs/' err
