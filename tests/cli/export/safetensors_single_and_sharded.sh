fsdpconv dcp-to-full -o all.safetensors "$FIXTURES/dcp/model_optim_ws2"
fsdpconv dcp-to-full --select model -o m.safetensors "$FIXTURES/dcp/model_optim_ws2"
fsdpconv dcp-to-full --select model --max-shard-size 40 -o shards "$FIXTURES/dcp/model_optim_ws2"
ls shards
fsdpconv diff "$FIXTURES/dcp/model_optim_ws2" all.safetensors | tail -n 1
fsdpconv diff m.safetensors shards
