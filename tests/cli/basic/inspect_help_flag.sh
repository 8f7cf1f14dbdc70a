# --help and `help inspect` print the same text
fsdpconv inspect --help > a
fsdpconv help inspect > b
cmp a b && cat a
