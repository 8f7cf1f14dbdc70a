# dcp.save'd values torch loads only with weights_only=False (BytesIO, numpy, Namespace, ...):
# shown by type and the globals their pickles name, read symbolically; nothing is executed.
cd "$FIXTURES/.."
fsdpconv inspect fixtures/dcp/values_ws1
