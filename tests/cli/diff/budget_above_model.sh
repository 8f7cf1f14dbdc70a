# A --max-memory far above the model (1TB, 1000TB) compares in one slab per tensor; it
# allocated budget-sized buffers before and failed with "out of memory".
fsdpconv diff --max-memory 1TB "$FIXTURES/full/tiny_vitlm.pt" "$FIXTURES/full/tiny_vitlm.pt"
fsdpconv diff --max-memory 1000TB "$FIXTURES/full/dtypes.pt" "$FIXTURES/full/dtypes.pt"
