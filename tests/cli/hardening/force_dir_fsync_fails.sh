# --force whose last step, syncing the output's directory after the rename, fails (a test hook
# fakes EIO there): OUT already holds the new checkpoint, so it stays, the old one is removed
# rather than left as OUT.partial-*, and the one-line message says so (exit 1).
in="$FIXTURES/full/tiny_vitlm.pt"
fsdpconv -q full-to-dcp --world-size 2 -o out "$in" || exit 11
FSDPCONV_TEST_FAIL_DIR_FSYNC=1 fsdpconv -q full-to-dcp --world-size 3 --force -o out "$in" 2>&1
echo "exit $?"
ls out | grep -c distcp
fsdpconv inspect --verify out >/dev/null && echo "new checkpoint verifies"
ls -A
