# A write that hits the file-size limit (like ENOSPC) fails cleanly: exit 1, no output,
# no partial directory.  ulimit -f counts 512-byte blocks in dash, 1024 in bash.
(ulimit -f 40; fsdpconv full-to-dcp --world-size 2 -o out "$FIXTURES/full/tiny_vitlm.pt") 2>err
rc=$?
sed 's/out\.partial-[0-9]*-[0-9a-f]*/out.partial-PID-R/' err >&2
ls -A
exit $rc
