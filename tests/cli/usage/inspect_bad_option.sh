fsdpconv inspect --frob x.pt
