# An output that is a dangling symlink is refused before any input is read (exit 2).
ln -s nowhere out
fsdpconv full-to-dcp --world-size 2 -o out /nonexistent.pt 2>&1
echo "exit $?"
ln -s nowhere2 out.safetensors
fsdpconv dcp-to-full -o out.safetensors /nonexistent 2>&1
echo "exit $?"
ls -A
