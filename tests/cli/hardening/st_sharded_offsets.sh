# Sharded safetensors whose saved_offsets make the inferred global shape overflow int64
# (issue 20): diff once overflowed a row size, inspect --checksum a box read; each command
# now exits 3 naming the file and the tensor, and writes nothing.
python3 "$FIXTURES/../tests/hostile/gen.py" "$FIXTURES" cases
for c in st_sharded_offset_2p62 st_sharded_bytes_2p61 st_sharded_grid_2p32 \
    st_sharded_empty_rows_2p40; do
    in=cases/$c/in
    for cmd in "diff $in $in" "inspect --checksum $in" "dcp-to-full -o $c.safetensors $in"; do
        # shellcheck disable=SC2086
        fsdpconv $cmd >out 2>err
        echo "$c ${cmd%% *}: exit $? $(wc -l <err) line: $(sed "s|^.*$in/||" err)"
        [ -s out ] && echo "  stdout not empty"
    done
done
ls -A | grep -v -e '^out$' -e '^err$' -e '^cases$'
exit 0
