#!/bin/sh
# `make test-wheel`: the pip-installable fsdpconv (pyproject.toml, setup.py).
#  - builds the wheel with the build venv (tests/setup/wheel_venv.sh) and reports its size
#    (at most 5 MiB);
#  - its name carries VERSION and the manylinux tag `auditwheel show` reports for it;
#  - its binary's readelf -d lists only glibc's libraries and the loader (the same check
#    refuses the system-linked build, so it is not vacuous);
#  - tests/wheel/isolated.sh, in a mount namespace: pip installs it into a fresh venv with the
#    system's zstd/deflate/jansson/pcre2/crypto hidden, and its fsdpconv converts the demo
#    model in roots that hold nothing but glibc: this machine's, and Debian bullseye's 2.31
#    (tests/setup/old_glibc.sh); a source build without the -dev packages stops in one line;
#  - check_dcp.py: the torch venv's PyTorch loads both DCPs bit-exactly.
# usage: tests/wheel/run.sh BUILD_VENV TORCH_PYTHON SYSTEM_FSDPCONV   (from the repository root)
set -eu
bv=$1
py=$2
sysbin=$(readlink -f "$3")
out="$(pwd)/build/wheel-test"
version=$(cat VERSION)
arch=$(uname -m)

fail() {
    echo "wheel: $*" >&2
    exit 1
}

sh tests/setup/wheel_venv.sh "$bv"
old_glibc=$(sh tests/setup/old_glibc.sh) || fail "could not fetch Debian bullseye's libc6"
rm -rf "$out"
mkdir -p "$out/dist"
"$bv/bin/pip" wheel --no-build-isolation --no-deps --disable-pip-version-check -q \
    -w "$out/dist" . || fail "pip wheel . failed"
set -- "$out"/dist/*.whl
[ $# -eq 1 ] && [ -f "$1" ] || fail "pip wheel . made $# wheels in $out/dist, want 1"
whl=$1
name=$(basename "$whl")
case "$name" in
fsdpconv-"$version"-py3-none-manylinux_*_"$arch".whl) ;;
*) fail "$name: want fsdpconv-$version-py3-none-manylinux_X_Y_$arch.whl" ;;
esac
tag=${name#fsdpconv-"$version"-py3-none-}
tag=${tag%.whl}
size=$(wc -c <"$whl")
echo "wheel: $name, $size bytes ($(awk -v s="$size" 'BEGIN { printf "%.1f", s / 1048576 }') MiB)"
[ "$size" -le 5242880 ] || fail "$name is $size bytes, over 5 MiB"

shown=$("$bv/bin/auditwheel" show "$whl" | tr '\n' ' ')
reported=$(echo "$shown" | sed -n 's/.*consistent with the following platform tag: *"\([^"]*\)".*/\1/p')
[ "$reported" = "$tag" ] || fail "auditwheel show says \"$reported\", the wheel's name says $tag: $shown"
echo "wheel: auditwheel show: $reported"
# The README promises RHEL 8 (glibc 2.28) and newer at least.
minor=$(echo "$tag" | awk -F_ '$2 == 2 { print $3 }')
[ -n "$minor" ] && [ "$minor" -le 28 ] || fail "$tag: newer than manylinux_2_28 (RHEL 8)"

# glibc's own libraries (libpthread and libdl are separate ones before glibc 2.34) and the loader.
glibc_only() { # $1: an ELF binary
    readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | while read -r lib; do
        case "$lib" in
        libc.so.6 | libm.so.6 | libpthread.so.0 | libdl.so.2 | librt.so.1 | ld-linux-*.so.2) ;;
        *) echo "$1 needs $lib"; return 1 ;;
        esac
    done
}
"$bv/bin/python" -c 'import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
open(sys.argv[2], "wb").write(z.read("fsdpconv-%s.data/scripts/fsdpconv" % sys.argv[3]))' \
    "$whl" "$out/fsdpconv" "$version"
glibc_only "$out/fsdpconv" || fail "the wheel's binary needs more than glibc"
glibc_only "$sysbin" >/dev/null && fail "the glibc-only check passes the system-linked $sysbin too"
echo "wheel: readelf -d: $(readelf -d "$out/fsdpconv" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')"

# A fresh venv with nothing installed; pip installs the wheel inside the namespace.
python3 -m venv "$out/venv"
unshare --mount --propagation private sh tests/wheel/isolated.sh "$whl" "$out/venv" "$sysbin" \
    "$out" "$version" "$bv" "$old_glibc" || fail "the installed wheel failed where the system's libraries are hidden"
"$py" tests/wheel/check_dcp.py fixtures/full/tiny_vitlm.pt "$out/dcp" "$out/dcp-old"
