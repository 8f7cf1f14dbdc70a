fsdpconv --frob
