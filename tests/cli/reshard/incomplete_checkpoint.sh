mkdir ck && cp "$FIXTURES"/dcp/model_ws2/*.distcp ck/
fsdpconv reshard --world-size 2 -o out ck
rc=$?
ls -A
exit $rc
