#!/bin/sh
# One source of truth (curl's lesson): each command's option table (cmd/) is
# what `fsdpconv <command> --help` lists, so comparing that list with the man
# page compares page, usage and table.  Every long option the usage lists
# must be documented in man/fsdpconv-<command>.1, and every option the page
# documents must be in the usage.
# usage: check_man.sh FSDPCONV
set -u
bin=${1:?usage: check_man.sh FSDPCONV}
bad=0
commands=$("$bin" --help | sed -n 's/^   \([a-z][a-z0-9-]*\)  .*/\1/p' | grep -vx help)
[ -n "$commands" ] || { echo "check-man: no commands in '$bin --help'"; exit 1; }
for name in $commands; do
    page="man/fsdpconv-$name.1"
    if [ ! -f "$page" ]; then
        echo "check-man: command $name has no man page $page"; bad=1; continue
    fi
    opts=$("$bin" "$name" --help | sed -n -E 's/^    (-[a-zA-Z], )?--([a-z0-9-]+).*/\2/p' | sort -u)
    [ -n "$opts" ] || { echo "check-man: '$bin $name --help' lists no options"; bad=1; }
    documented=$(grep -o 'Fl Fl [a-z0-9-]*' "$page" | sed 's/Fl Fl //' | sort -u)
    for o in $opts; do
        echo "$documented" | grep -qx -- "$o" || { echo "check-man: --$o of '$name --help' is not in $page"; bad=1; }
    done
    for o in $documented; do
        echo "$opts" | grep -qx -- "$o" || { echo "check-man: $page documents --$o, which '$name --help' lacks"; bad=1; }
    done
done
[ "$bad" -eq 0 ] && echo "check-man: ok"
exit $bad
