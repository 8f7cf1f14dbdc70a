# A value whose pickle holds a tensor inside a Namespace cannot be embedded in a .pt: refused by
# name with the way out; --drop leaves it out; reshard still carries its bytes.
fsdpconv dcp-to-full -o out.pt "$FIXTURES/dcp/opaque_tensor_ws1" 2>err.txt
echo "exit $?"
sed 's|/[^ ]*/out.pt|out.pt|' err.txt
test -e out.pt && echo "out.pt exists"
fsdpconv dcp-to-full -q --drop '^ns$' -o out.pt "$FIXTURES/dcp/opaque_tensor_ws1"
echo "exit $?"
fsdpconv reshard -q --world-size 2 -o ws2 "$FIXTURES/dcp/opaque_tensor_ws1"
fsdpconv diff "$FIXTURES/dcp/opaque_tensor_ws1" ws2
