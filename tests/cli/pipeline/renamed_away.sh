fsdpconv full-to-dcp --world-size 2 -o out --rename '^embed_tokens\.=tok_embeddings.' \
    --tie lm_head.weight=embed_tokens.weight "$FIXTURES/full/tiny_vitlm.pt"
