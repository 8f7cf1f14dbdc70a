fsdpconv inspect a.pt b.pt
