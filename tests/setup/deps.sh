#!/bin/sh
# Install the Debian packages the build and the tests need, only where missing.
# Idempotent; needs root (or sudo) only when something is missing.
set -eu
pkgs="build-essential pkg-config libzstd-dev libcmocka-dev libdeflate-dev libjansson-dev
libssl-dev libpcre2-dev liburing-dev mandoc clang clang-format libclang-rt-14-dev zstd strace time python3 python3-venv
ca-certificates"
missing=""
for p in $pkgs; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
if [ -z "$missing" ]; then
    echo "deps: all Debian packages present"
    exit 0
fi
echo "deps: installing:$missing"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
