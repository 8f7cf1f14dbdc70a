# --dtype casts floating tensors but not optimizer step counters (bf16 cannot count past 256).
fsdpconv reshard --dtype bf16 --world-size 2 -o out "$FIXTURES/dcp/model_optim_ws2"
fsdpconv inspect --json out | grep -A1 '"key": "optim.state.emb.weight.\(step\|exp_avg\)"' | grep dtype
