fsdpconv --help
