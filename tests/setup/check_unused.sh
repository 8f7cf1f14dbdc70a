#!/bin/sh
# List the functions of our objects that the linker dropped with --gc-sections
# (the binary never calls them), minus those named in the allow file, and
# fail when any is left.  The allow file has one `name  reason` a line and
# # comments: every accepted entry says why it stays.
# Only global functions count: a header's static inline helper that one file
# does not call is not dead code.
# usage: check_unused.sh GC_SECTIONS_LOG GLOBAL_SYMBOLS ALLOW_FILE
set -u
log=$1
globals=$2
allow=$3
unused=$(sed -n "s/.*removing unused section '\.text\.\([A-Za-z0-9_]*\)' in file '.*build\/[^/]*\/\([a-z]*\)\/.*/\1 \2/p" "$log" |
    sort -u | while read -r fn dir; do grep -qx -- "$fn" "$globals" && echo "$fn $dir"; done)
accepted=$(grep -v '^[[:space:]]*#' "$allow" 2>/dev/null | awk 'NF { print $1 }' | sort -u)
bad=0
stale=""
echo "$unused" | while read -r fn dir; do
    [ -n "$fn" ] || continue
    if echo "$accepted" | grep -qx -- "$fn"; then
        continue
    fi
    echo "check-unused: $dir: $fn is never used by the binary"
done | tee /tmp/check_unused.$$ >&2
[ -s /tmp/check_unused.$$ ] && bad=1
rm -f /tmp/check_unused.$$
for a in $accepted; do
    echo "$unused" | awk '{ print $1 }' | grep -qx -- "$a" || stale="$stale $a"
done
if [ -n "$stale" ]; then
    echo "check-unused: $allow names functions that are used now or gone:$stale" >&2
    bad=1
fi
n=$(echo "$unused" | awk 'NF' | wc -l)
[ "$bad" -eq 0 ] && echo "check-unused: ok ($n unused functions, each justified in $allow)"
exit $bad
