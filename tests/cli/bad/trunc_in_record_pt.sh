cd "$FIXTURES/.."
# exactly one line on stderr, naming the file
fsdpconv inspect fixtures/bad/trunc_in_record.pt 2>err
rc=$?
cat err >&2
[ "$(wc -l < err)" -eq 1 ] || exit 99
exit $rc
