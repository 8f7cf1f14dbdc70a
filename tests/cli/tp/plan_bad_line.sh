printf '# a plan\nweight$ 0\njustoneword\n' > plan.txt
fsdpconv full-to-dcp --mesh shard=2,tp=2 --tp-plan plan.txt --dry-run "$FIXTURES/full/tiny_vitlm.pt"
