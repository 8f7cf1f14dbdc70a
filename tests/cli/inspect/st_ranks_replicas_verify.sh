# A rank's file saved twice (same boxes) is a replica; --verify compares replicas' bytes
# and names the file whose copy differs.
fsdpconv -q full-to-dcp --world-size 2 --format safetensors -o st "$FIXTURES/full/tiny_vitlm.pt" || exit 1
cp st/shard-00001-model-00001-of-00001.safetensors st/shard-00003-model-00001-of-00001.safetensors
fsdpconv inspect --verify st | tail -3
python3 - <<'PY'
p = "st/shard-00003-model-00001-of-00001.safetensors"
b = bytearray(open(p, "rb").read())
b[-1] ^= 0x40
open(p, "wb").write(b)
PY
fsdpconv inspect st | tail -3
fsdpconv inspect --verify st
