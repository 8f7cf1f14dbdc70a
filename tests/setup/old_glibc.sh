#!/bin/sh
# Fetch (once) Debian bullseye's libc6, glibc 2.31: the oldest glibc Debian's mirror still
# carries, and older than the build machine's. tests/wheel/ runs the wheel's binary on it, in a
# root that holds only these libraries. apt-get with a private sources list and state, so the
# machine's own apt configuration is untouched. Prints the dir holding the extracted package.
# usage: tests/setup/old_glibc.sh [DIR]
set -eu
dir="${1:-$HOME/.cache/fsdpconv/glibc-bullseye}"
if [ -f "$dir/.ready" ]; then
    echo "$dir/root"
    exit 0
fi
rm -rf "$dir"
mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial" "$dir/deb"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bullseye main" \
    >"$dir/sources.list"
apt_opts="-o Dir::Etc::SourceList=$dir/sources.list -o Dir::Etc::SourceParts=/dev/null
-o Dir::State::Lists=$dir/lists -o Dir::Cache=$dir/cache -o Dir::State::status=/dev/null
-o APT::Sandbox::User=root"
# shellcheck disable=SC2086  # one option per word
apt-get $apt_opts -qq update >&2
# shellcheck disable=SC2086
(cd "$dir/deb" && apt-get $apt_opts -qq download libc6 >&2)
dpkg-deb -x "$dir"/deb/libc6_*.deb "$dir/root"
touch "$dir/.ready"
echo "$dir/root"
