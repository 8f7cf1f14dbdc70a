: > empty.pt
fsdpconv inspect empty.pt
