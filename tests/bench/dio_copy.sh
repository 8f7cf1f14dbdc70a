#!/bin/sh
# The direct-I/O yardstick of bench_io.sh: copy SRC (a file, or a directory's files) to DST with
# dd, whole 8 MiB blocks with O_DIRECT both ways (one request in flight), the unaligned rest of
# each file buffered, then fsync.
# usage: sh tests/bench/dio_copy.sh SRC DST
set -eu
copy() {
    n=$(($(stat -c %s "$1") / 8388608))
    dd if="$1" of="$2" bs=8M count=$n iflag=direct oflag=direct status=none
    dd if="$1" of="$2" bs=8M skip=$n seek=$n conv=notrunc,fsync status=none
}
if [ -d "$1" ]; then
    mkdir "$2"
    for f in "$1"/* "$1"/.metadata; do
        copy "$f" "$2/$(basename "$f")"
    done
else
    copy "$1" "$2"
fi
