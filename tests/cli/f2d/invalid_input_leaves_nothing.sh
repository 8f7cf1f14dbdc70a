fsdpconv full-to-dcp --world-size 2 -o out "$FIXTURES/bad/pickle_os_system.pt"
rc=$?
ls -A >&2
exit $rc
