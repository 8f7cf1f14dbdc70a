# -o '' names no file: a usage error (exit 2) from every command that writes, before any input is
# read (the input here does not exist) and before anything is created.
in="$FIXTURES/dcp/model_ws2"
fsdpconv dcp-to-full -o '' "$in" 2>&1
echo "exit $?"
fsdpconv full-to-dcp --world-size 1 -o '' /nonexistent.pt 2>&1
echo "exit $?"
fsdpconv reshard --world-size 1 -o '' "$in" 2>&1
echo "exit $?"
ls -A
