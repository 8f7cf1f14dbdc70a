# Messages of the hardening campaign, one line each: a worker's failure under --nproc (once, not
# "rank 2: rank 2:" from every rank), a text file named .safetensors, a NUL in relative_path.
in="$FIXTURES/full/tiny_vitlm.pt"
(ulimit -f 20; fsdpconv full-to-dcp --nproc 3 --world-size 3 -o out "$in" 2>err)
echo "exit $?"
wc -l <err
grep -c "rank [0-9]*: rank" err
python3 "$FIXTURES/../tests/hostile/gen.py" "$FIXTURES" cases
fsdpconv inspect cases/st_text_safetensors/in 2>&1 | sed 's/^.*in\/model.safetensors: //'
fsdpconv inspect cases/dcp_relpath_nul/in 2>&1 | sed 's/^.*relative_path/relative_path/'
ls -A | grep -v -e err -e cases
exit 0
