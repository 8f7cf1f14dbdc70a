# --dry-run prints the plan; when stdout cannot take it (a full disk, here /dev/full) the command
# says so in one line and fails, however long the plan (stdio may have failed mid-way already).
fsdpconv full-to-dcp --world-size 2 --dry-run "$FIXTURES/full/tiny_vitlm.pt" >/dev/full 2>err
echo "exit $?"
cat err
fsdpconv reshard --world-size 2 --dry-run "$FIXTURES/dcp/model_ws2" >/dev/full 2>err
echo "exit $?"
cat err
