# K, M, G, T and KiB..TiB are powers of 1024, KB..TB (any case of the letter)
# powers of 1000: --max-memory refuses under 4096 bytes, so 4KB, 0.004MB,
# 0.000004GB and 0.000000004TB (4000 bytes) are refused and their binary twins
# taken.  Bad spellings are refused with exit 2 and a line that says why.
f="$FIXTURES/full/tiny_vitlm.pt"
for s in 4096 64K 4k 4KiB 4KB 4kB 4.096KB 0.004M 0.004MB 0.000004G 0.000004GiB 0.000004GB \
    0.000000004T 0.000000004TB 1.5GB 2GiB 4KiBx 4XB 4iB 4KIB KB 4B -1 nan; do
    fsdpconv diff --max-memory "$s" "$f" "$f" >/dev/null 2>err
    echo "$s: exit $? $(head -n 1 err)"
done
