# Staging names cannot be planted: for every command and output kind, symlinks planted where a
# staging file or directory could go (the names the pre-fix code used, "<OUT>.partial-<pid>-<time>"
# and "<OUT>.old-<pid>-<time>", for the exact pid of the run, its neighbours and the seconds around
# now) are never followed: their targets stay untouched and OUT is a real file or directory.
echo precious >victim
mkdir victim_dir && echo precious >victim_dir/keep
cp victim victim.orig
dcp="$FIXTURES/dcp/model_optim_ws2"
pt="$FIXTURES/full/tiny_vitlm.pt"

# victim=V planted OUT ARGS...: run fsdpconv under the pid of this `sh -c` (exec keeps it),
# having planted links to V (victim for file outputs, victim_dir for directories) at the names first.
planted() {
    out=$1
    shift
    sh -c '
        out=$1
        shift
        now=$(date +%s)
        for p in $(seq $(($$ - 3)) $(($$ + 3))); do
            for t in $(seq $((now - 2)) $((now + 8))); do
                ln -s "$PWD/$victim" "$out.partial-$p-$t"
                ln -s "$PWD/$victim" "$out.old-$p-$t"
            done
        done
        exec fsdpconv -q "$@"' sh "$out" "$@"
    rc=$?
    v=CHANGED
    cmp -s victim victim.orig && v=intact
    d=CHANGED
    [ "$(ls -A victim_dir)" = keep ] && cmp -s victim_dir/keep victim.orig && d=intact
    if [ -L "$out" ]; then
        what=symlink
    elif [ -d "$out" ]; then
        what=dir
    elif [ -f "$out" ]; then
        what=file
    else
        what=missing
    fi
    echo "$out: exit $rc, $what, victim $v, victim_dir $d"
    find . -maxdepth 1 -type l -name "$out.*" -delete
}

victim=victim planted out.safetensors dcp-to-full -o out.safetensors "$dcp"
victim=victim planted out.pt dcp-to-full -o out.pt "$dcp"
victim=victim_dir planted hf dcp-to-full --max-shard-size 40 -o hf "$dcp"
victim=victim_dir planted dcpout full-to-dcp --world-size 2 -o dcpout "$pt"
victim=victim_dir planted stout full-to-dcp --world-size 2 --format safetensors -o stout "$pt"
victim=victim_dir planted rs reshard --world-size 3 -o rs "$dcp"
victim=victim_dir planted mp full-to-dcp --nproc 2 --world-size 3 -o mp "$pt"
# --force moving the old output aside (the test hook forces the two-rename path)
victim=victim_dir FSDPCONV_TEST_PAUSE_MID_REPLACE=0 planted dcpout full-to-dcp --world-size 3 --force -o dcpout "$pt"
victim=victim FSDPCONV_TEST_PAUSE_MID_REPLACE=0 planted out.pt dcp-to-full --force -o out.pt "$dcp"
for o in out.safetensors out.pt hf dcpout stout rs mp; do
    fsdpconv inspect --verify "$o" >/dev/null || echo "$o does not verify"
done
ls -A | tr '\n' ' '
echo
