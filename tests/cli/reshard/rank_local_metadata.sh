# A checkpoint saved without collectives has only __0.metadata: read, reshard, compare.
cd "$FIXTURES/.."
fsdpconv inspect fixtures/dcp/ranklocal_ws1 | tail -n 4
fsdpconv reshard --world-size 2 -o "$OLDPWD/out" fixtures/dcp/ranklocal_ws1
fsdpconv diff fixtures/dcp/ranklocal_ws1 "$OLDPWD/out"
