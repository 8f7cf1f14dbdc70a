# An HF directory whose config.json ties word embeddings (tie_word_embeddings
# absent: transformers' default, true) and lacks lm_head.weight, as
# save_pretrained writes it: one note names the --tie to add; with it (or with
# tie_word_embeddings false) no note.
mkdir hf
fsdpconv dcp-to-full -q --drop '^lm_head\.weight$' --rename '^embed_tokens\.weight$=model.embed_tokens.weight' \
    -o hf/model.safetensors "$FIXTURES/full/tiny_vitlm.pt"
echo '{"model_type": "qwen2"}' >hf/config.json
fsdpconv full-to-dcp --world-size 2 -o a hf 2>&1 | grep -v ': wrote '
fsdpconv full-to-dcp --world-size 2 -o b hf/model.safetensors 2>&1 | grep -c -- '--tie'
fsdpconv full-to-dcp --world-size 2 --tie lm_head.weight=model.embed_tokens.weight -o c hf 2>&1 | grep -v ": wrote "
echo '{"model_type": "qwen2", "tie_word_embeddings": false}' >hf/config.json
fsdpconv full-to-dcp --world-size 2 -o d hf 2>&1 | grep -v ": wrote "
fsdpconv inspect --key '^lm_head' c | tail -n 1
