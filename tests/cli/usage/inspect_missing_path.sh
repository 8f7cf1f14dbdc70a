fsdpconv inspect
