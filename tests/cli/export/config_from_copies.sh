# --config-from copies config, generation config and tokenizer files (a symlink
# inside the directory is fine) next to model.safetensors; files it does not
# know stay behind.
mkdir hf && echo '{"model_type": "llama"}' >hf/config.json
echo '{"bos_token_id": 1}' >hf/generation_config.json
echo '{"version": "1.0"}' >hf/tok.real && ln -s tok.real hf/tokenizer.json
printf 'a b\n' >hf/merges.txt && echo junk >hf/notes.txt
fsdpconv dcp-to-full -q --select model --config-from hf -o out "$FIXTURES/dcp_train/plain" &&
ls out && cmp hf/tok.real out/tokenizer.json && cmp hf/config.json out/config.json &&
[ ! -L out/tokenizer.json ] &&
fsdpconv dcp-to-full -q --select model -o m.safetensors "$FIXTURES/dcp_train/plain" &&
fsdpconv diff m.safetensors out/model.safetensors | tail -n 1
