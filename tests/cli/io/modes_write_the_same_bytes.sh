# --io direct, auto and buffered (and $FSDPCONV_IO) write the same bytes in every command
# and output format: the direct writer's aligned blocks and buffered ends (fc_dio.c), in
# both executor modes (source order; file by file with --compress), and its reads.
# -v names the path that moved the data.
pt="$FIXTURES/full/tiny_vitlm.pt"
run() { # run MODE NAME ARGS...: one conversion into MODE/NAME (named NAME in .metadata)
    mode=$1
    name=$2
    shift 2
    mkdir -p "$mode"
    (cd "$mode" && fsdpconv -v "$@" --io "$mode" -o "$name" 2>>"../$mode.log") ||
        echo "$mode $name failed"
}
for mode in buffered direct auto; do
    run $mode dcp full-to-dcp --world-size 3 "$pt"
    run $mode zstd full-to-dcp --world-size 2 --compress zstd:3 "$pt"
    run $mode st full-to-dcp --world-size 2 --format safetensors "$pt"
    run $mode threads1 full-to-dcp --world-size 4 --threads 1 --max-memory 4KiB "$pt"
    run $mode resh reshard --world-size 2 dcp
    run $mode out.safetensors dcp-to-full dcp
    run $mode out.pt dcp-to-full --max-memory 4KiB zstd
done
# The same from the environment; --io on the command line wins over it.
mkdir -p env
FSDPCONV_IO=direct fsdpconv -v full-to-dcp --world-size 3 -o env/dcp "$pt" 2>env.log
FSDPCONV_IO=direct fsdpconv -v full-to-dcp --world-size 3 --io buffered -o env/buf "$pt" \
    2>>env.log
for mode in direct auto; do
    diff -r buffered $mode >/dev/null && echo "$mode: same bytes as buffered"
done
cmp -s env/dcp/__0_0.distcp buffered/dcp/__0_0.distcp && echo "env: same bytes as buffered"
# Direct: every data read went direct (the fixture's tensors are smaller than a block, so its
# writes are the buffered ends of runs: tests/unit/test_io.c writes whole blocks), but in the
# two runs at --max-memory 4KiB, which leaves no room for direct I/O's buffers.
grep -c 'io direct: read [0-9.]* KiB direct, 0 bytes buffered; wrote ' direct.log
grep -c 'buffered (direct I/O off: .* no room for its buffers)$' direct.log
grep -c 'io buffered: read 0 bytes direct, .* buffered; wrote 0 bytes direct' buffered.log
grep -o 'io [a-z]*:' env.log
FSDPCONV_IO=sideways fsdpconv full-to-dcp --world-size 2 -o bad "$pt" 2>&1
echo "exit $?"
fsdpconv full-to-dcp --world-size 2 --io sideways -o bad "$pt" 2>&1 | head -1
