# A tokenizer file that is a symlink out of the --config-from directory is not
# followed: exit 2 naming it, and no output.
mkdir hf && echo '{"model_type": "llama"}' >hf/config.json
echo secret >outside.txt && ln -s ../outside.txt hf/tokenizer.json
fsdpconv dcp-to-full --select model --config-from hf -o out "$FIXTURES/dcp_train/plain"
rc=$?
ls
exit $rc
