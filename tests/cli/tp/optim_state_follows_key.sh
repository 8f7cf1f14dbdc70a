# Reading back a get_state_dict checkpoint ("model.<fqn>", "optim.state.<fqn>.exp_avg"), a rule
# sees the parameter's stored key for the parameter and for its state alike: anchored at the
# bare FQN it matches neither (an error, not a model replicated while its state is sharded),
# anchored at "model." it shards both.
in="$FIXTURES/dcp_train/plain"
fsdpconv reshard --mesh shard=2,tp=2 --tp '^block\.fc1\.weight$=0' --dry-run "$in" 2>err
echo "exit $?"
sed 's/^fsdpconv: reshard: //' err
fsdpconv reshard --mesh shard=2,tp=2 --tp '^model\.block\.fc1\.weight$=0' --dry-run "$in" >plan.txt || exit 1
grep -E '^tensor (model|optim\.state)\.block\.fc1\.weight' plan.txt | sed 's/  */ /g'
