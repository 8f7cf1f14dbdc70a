# dcp-to-full --config-from writes a directory for from_pretrained: a training
# DCP's optimizer state is refused without --select model, and nothing is left.
mkdir hf && echo '{"model_type": "llama", "tie_word_embeddings": false}' >hf/config.json
fsdpconv dcp-to-full --config-from hf -o out "$FIXTURES/dcp_train/plain"
rc=$?
ls
exit $rc
