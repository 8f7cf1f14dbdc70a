# Plan regexes run under PCRE2's limits: a pattern that backtracks exponentially fails at once
# naming its FILE:LINE, the pattern that crashes glibc's regexec is harmless, and no run leaves
# anything behind (OUT.partial-* included).
in="$FIXTURES/full/tiny_vitlm.pt"
printf 'qkv\\.weight$ 0\n^(?:(?:\\w|\\.)+)+\\d$ 0\n' >slow.tp
fsdpconv full-to-dcp --mesh shard=2,tp=2 --tp-plan slow.tp -o out "$in" 2>err
echo "exit $?"
sed 's/^.*slow\.tp:/slow.tp:/' err
fsdpconv full-to-dcp --mesh shard=2,tp=2 --tp '^(?:(?:\w|\.)+)+\d$=0' -o out "$in" 2>err
echo "exit $?"
cat err
printf '(|)(\\1\\1)* 0\n' >glibc.tp
fsdpconv full-to-dcp --mesh shard=2,tp=2 --tp-plan glibc.tp -o out "$in" 2>err
echo "exit $? lines $(wc -l <err)"
ls -A | grep -v -e '\.tp$' -e '^err$'
exit 0
