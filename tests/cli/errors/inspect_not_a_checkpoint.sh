printf 'hello world, not a checkpoint\n' > notes.txt
fsdpconv inspect notes.txt
