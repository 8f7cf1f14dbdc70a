# use_collectives=False on 2 ranks: __0.metadata and __1.metadata both list the 0-d 'step':
# replicas, read once; --verify compares their bytes.
cd "$FIXTURES/.."
fsdpconv inspect --verify fixtures/dcp/ranklocal_ws2
