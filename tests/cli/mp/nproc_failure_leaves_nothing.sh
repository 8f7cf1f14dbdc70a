# A write failure on any rank: every process exits non-zero and no output appears.
(ulimit -f 40; fsdpconv full-to-dcp --nproc 3 --world-size 6 -o out "$FIXTURES/full/tiny_vitlm_train.pt") 2>err
rc=$?
grep -q 'File too large' err || { cat err >&2; exit 99; }
ls -A
exit $rc
