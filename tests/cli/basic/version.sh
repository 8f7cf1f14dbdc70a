fsdpconv --version
