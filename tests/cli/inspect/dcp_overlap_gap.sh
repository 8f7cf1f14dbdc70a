# inspect's coverage check proves a tiling, not a count: a .metadata whose chunk element counts
# add up over an overlap and a gap (1-D and 2-D), and a rank-local save, are reported and refused
python3 "$FIXTURES/../tests/hostile/gen.py" "$FIXTURES" cases
for c in dcp_overlap_gap_1d dcp_overlap_gap_2d dcp_ranklocal_overlap_gap; do
    fsdpconv inspect cases/$c/in >out 2>err
    echo "exit $?: $(sed 's/^.*in: //' err)"
    sed -n '/^coverage:/,$p' out
done
exit 0
