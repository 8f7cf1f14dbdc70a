# A NUL byte in a --rules or --tp-plan file used to end the file silently (the rules after it
# were dropped and the run exited 0).  Now: exit 2, naming the file and the NUL's line.
in="$FIXTURES/full/tiny_vitlm.pt"
printf 'drop ^temperature$\nrename ^step_count$=steps\0\ndrop ^logit_scale$\n' >r.rules
fsdpconv full-to-dcp --world-size 2 --rules r.rules -o out "$in" 2>err
echo "exit $?"
cat err
printf 'qkv\\.weight$ 0\n\0fc2\\.weight$ 1\n' >p.tp
fsdpconv full-to-dcp --mesh shard=2,tp=2 --tp-plan p.tp -o out "$in" 2>err
echo "exit $?"
cat err
ls -A | grep -v -e err -e r.rules -e p.tp
exit 0
