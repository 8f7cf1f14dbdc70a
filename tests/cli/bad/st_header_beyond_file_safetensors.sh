cd "$FIXTURES/.."
# exactly one line on stderr, naming the file
fsdpconv inspect fixtures/bad/st_header_beyond_file.safetensors 2>"$OLDPWD/err"
rc=$?
cat "$OLDPWD/err" >&2
[ "$(wc -l < "$OLDPWD/err")" -eq 1 ] || exit 99
exit $rc
