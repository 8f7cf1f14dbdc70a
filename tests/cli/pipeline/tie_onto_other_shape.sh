# An existing destination of another shape is refused (it used to be replaced silently).
fsdpconv full-to-dcp --world-size 2 -o out --tie norm.weight=embed_tokens.weight "$FIXTURES/full/tiny_vitlm.pt"
