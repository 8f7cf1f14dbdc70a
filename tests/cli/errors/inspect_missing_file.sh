fsdpconv inspect does-not-exist.pt
