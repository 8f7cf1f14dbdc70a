# Rules that grow without end stop with the rule that passes a cap, named: doubling --copy rules
# at the key cap (8x the input's keys, at least 1,000,000), doubling renames at the 64 KiB key.
in="$FIXTURES/full/tiny_vitlm.pt"
copies=""
i=1
while [ $i -le 30 ]; do copies="$copies --copy ^(.*)\$=\\1.c$i"; i=$((i + 1)); done
# shellcheck disable=SC2086
fsdpconv full-to-dcp --world-size 2 $copies -o out "$in" 2>err
echo "exit $?"
cat err
renames=""
i=1
while [ $i -le 40 ]; do renames="$renames --rename ^(.*)\$=\\1\\1"; i=$((i + 1)); done
# shellcheck disable=SC2086
fsdpconv full-to-dcp --world-size 2 $renames -o out "$in" 2>err
echo "exit $?"
sed 's/of .* would/of KEY would/' err
ls -A | grep -v '^err$'
exit 0
