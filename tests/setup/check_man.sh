#!/bin/sh
# One source of truth (curl's lesson): every long option in a command's
# longopts[] must appear in its man page, and every option the page documents
# must exist in longopts[].
set -u
bad=0
for src in cmd/cmd_*.c; do
    name=$(basename "$src" .c | sed 's/^cmd_//; s/_/-/g')
    [ "$name" = help ] && continue
    page="man/fsdpconv-$name.1"
    if [ ! -f "$page" ]; then
        echo "check-man: $src has no man page $page"; bad=1; continue
    fi
    # Options shared through FC_JOB_LONGOPTS live in cmd/commands.h.
    shared=""
    grep -q FC_JOB_LONGOPTS "$src" && shared=cmd/commands.h
    opts=$(cat "$src" $shared | grep -oE '\{ *"[a-z0-9-]+", *[a-z_]+_argument' |
        sed -E 's/\{ *"([a-z0-9-]+)".*/\1/' | sort -u)
    documented=$(grep -o 'Fl Fl [a-z0-9-]*' "$page" | sed 's/Fl Fl //' | sort -u)
    for o in $opts; do
        echo "$documented" | grep -qx -- "$o" || { echo "check-man: --$o of $src is not in $page"; bad=1; }
    done
    for o in $documented; do
        echo "$opts" | grep -qx -- "$o" || { echo "check-man: $page documents --$o, which $src lacks"; bad=1; }
    done
done
[ "$bad" -eq 0 ] && echo "check-man: ok"
exit $bad
