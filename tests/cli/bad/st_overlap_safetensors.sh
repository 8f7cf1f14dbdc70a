cd "$FIXTURES/.."
# exactly one line on stderr, naming the file
fsdpconv inspect fixtures/bad/st_overlap.safetensors 2>err
rc=$?
cat err >&2
[ "$(wc -l < err)" -eq 1 ] || exit 99
exit $rc
