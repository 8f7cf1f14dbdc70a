# --format safetensors: worker processes (each writes the rank files it owns, header first)
# and writer threads give the same bytes as one thread.
in="$FIXTURES/full/tiny_vitlm.pt"
fsdpconv full-to-dcp --format safetensors --world-size 5 --threads 1 -o one "$in"
fsdpconv full-to-dcp --format safetensors --world-size 5 --threads 3 -o threads "$in"
fsdpconv full-to-dcp --format safetensors --world-size 5 --nproc 3 -o mp "$in"
for f in one/*; do
    n=$(basename "$f")
    cmp "$f" "threads/$n" && cmp "$f" "mp/$n" && echo "$n identical"
done
