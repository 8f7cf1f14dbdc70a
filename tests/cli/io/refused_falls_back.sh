# Where the filesystem refuses O_DIRECT (ramfs here, mounted in a user and mount namespace;
# tmpfs takes O_DIRECT since Linux 6.6), --io direct writes and reads buffered instead,
# silently, with the same bytes; -v says so.
pt="$FIXTURES/full/tiny_vitlm.pt"
mkdir disk ram
(
    cd disk || exit 1
    fsdpconv -q full-to-dcp --world-size 3 --io buffered -o dcp "$pt"
    fsdpconv -q dcp-to-full --io buffered -o out.pt dcp
    fsdpconv -q reshard --world-size 2 --io buffered -o resh dcp
)
unshare --user --map-root-user --mount sh -c '
    mount -t ramfs ramfs ram && cd ram || exit 1
    fsdpconv -v full-to-dcp --world-size 3 --io direct -o dcp "$1" 2>>../v.log || echo f2d failed
    fsdpconv -v dcp-to-full --io direct -o out.pt dcp 2>>../v.log || echo d2f failed
    fsdpconv -v reshard --world-size 2 --io direct -o resh dcp 2>>../v.log || echo rs failed
    diff -r ../disk . >/dev/null && echo "same bytes as buffered on disk"
' sh "$pt"
# Writes all buffered; reads too where the input is on ramfs (full-to-dcp's is on disk).
grep -c 'io direct: .*; wrote 0 bytes direct, .* buffered (O_DIRECT refused here: buffered instead)$' v.log
grep -c 'io direct: read 0 bytes direct, ' v.log
