fsdpconv help inspect
