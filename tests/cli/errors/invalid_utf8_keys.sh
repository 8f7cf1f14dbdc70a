# A key that is not UTF-8 cannot be a torch key (a Python str): one a rule or an input prefix
# would make is refused before anything is written (exit 2), naming the rule and the key with
# its bad bytes as \xNN.  (Inputs holding such keys: tests/hostile, exit 3.)
dcp="$FIXTURES/dcp/model_ws2"
bad=$(printf '^model\\.counter$=bad\377key')
fsdpconv dcp-to-full --rename "$bad" -o x.pt "$dcp" 2>&1
echo "exit $?"
fsdpconv dcp-to-full --rename "$bad" -o x.safetensors "$dcp" 2>&1
echo "exit $?"
fsdpconv full-to-dcp --world-size 2 --rename "$bad" -o d "$dcp" 2>&1
echo "exit $?"
fsdpconv reshard --world-size 2 --rename "$bad" -o r "$dcp" 2>&1
echo "exit $?"
fsdpconv full-to-dcp --world-size 2 -o d "$(printf 'p\376.')=$dcp" 2>err
echo "exit $?"
sed "s|$FIXTURES|FIXTURES|" err
rm err
# valid rules one by one, but --strip-prefix cuts 'é' (c3 a9) in half
fsdpconv full-to-dcp --world-size 2 --rename '^model\.counter$=é' --strip-prefix "$(printf '\303')" \
    -o d "$dcp" 2>&1
echo "exit $?"
ls -A
