# A flipped bit in a stored tensor is caught by every reader (exit 3, file and item named);
# --no-verify reads it anyway.
cp -r "$FIXTURES/dcp/model_ws2" ck
python3 - ck/__0_0.distcp <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
h = b.rfind(b"PK\x03\x04", 0, b.find(b"/data/0"))  # the first storage record's local header
n, x = struct.unpack_from("<HH", b, h + 26)
b[h + 30 + n + x] ^= 0x10
open(sys.argv[1], "wb").write(b)
PY
for cmd in "dcp-to-full -o out.safetensors" "reshard --world-size 3 -o out" "diff ck"; do
    fsdpconv $cmd ck 2>err
    [ $? -eq 3 ] || exit 11
    [ "$(wc -l <err)" -eq 1 ] && grep -q "ck/__0_0.distcp @ 0: item '.*': the data's CRC-32" err || exit 12
    [ ! -e out ] && [ ! -e out.safetensors ] || exit 13
done
fsdpconv -q dcp-to-full --no-verify -o out.safetensors ck || exit 14
fsdpconv -q reshard --no-verify --world-size 3 -o out ck || exit 15
fsdpconv diff --no-verify ck ck >/dev/null || exit 16
