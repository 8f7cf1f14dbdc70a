#!/bin/sh
# Runs inside `unshare --mount` (tests/wheel/run.sh): installs the wheel into a fresh venv and
# converts the demo model with it while the system's libraries are out of reach, in two steps:
#  1. zstd, libdeflate, jansson, PCRE2 and libcrypto hidden: /dev/null is bind-mounted over
#     every .so and .a of theirs in the library dirs and /usr/include is an empty tmpfs; pip
#     installs the wheel; fsdpconv --version, python -m fsdpconv and the man pages are checked;
#  2. glibc only: the conversion runs chrooted (unshare --root) in a minimal root that holds
#     the loader, the glibc libraries the wheel's binary names (readelf -d), the venv, the
#     input and the output dir, and nothing else.
# In each step the system's dynamically linked build must fail to start, or nothing was hidden.
# usage: isolated.sh WHEEL VENV SYSTEM_FSDPCONV OUT_DIR VERSION   (from the repository root)
set -eu
whl=$1 venv=$2 sysbin=$3 out=$4 version=$5
root="$out/root"
fixture=fixtures/full/tiny_vitlm.pt

fail() {
    echo "wheel: $*" >&2
    exit 1
}

# The minimal root, built while `mount` still starts (it needs libpcre2-8 through libselinux).
# Empty dirs bind-mounted now show the venv once pip has filled it, and the DCP written there.
bin="$out/fsdpconv" # run.sh took it out of the wheel
needed=$(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
interp=$(readelf -l "$bin" | sed -n 's/.*Requesting program interpreter: \(.*\)\]/\1/p')
libdir=$(dirname "$(readlink -f "$(cc -print-file-name=libc.so.6)")")
mkdir -p "$root$libdir" "$root$(dirname "$interp")" "$root$venv" "$root/fixtures" "$root/out" "$root/bin"
for lib in $needed; do
    cp -L "$libdir/$lib" "$root$libdir/" || fail "the wheel's binary needs $lib, not in $libdir"
done
cp -L "$interp" "$root$interp"
cp "$sysbin" "$root/bin/fsdpconv-system"
cp "$fixture" "$root/fixtures/"
mount --bind "$venv" "$root$venv"
mount --bind "$out" "$root/out"

# Step 1. pcre2's shared library goes last: `mount` cannot start after it is hidden.
mount -t tmpfs tmpfs /usr/include
ma=$(cc -print-multiarch)
for d in /lib /usr/lib /usr/local/lib "/lib/$ma" "/usr/lib/$ma" "/usr/local/lib/$ma"; do
    for f in "$d"/libzstd.* "$d"/libdeflate.* "$d"/libjansson.* "$d"/libcrypto.* "$d"/libpcre2-8.*; do
        [ -f "$f" ] && readlink -f "$f"
    done
done | sort -u | awk '/libpcre2-8\.so/ { last = last $0 "\n"; next } { print } END { printf "%s", last }' >"$out/hidden"
[ -s "$out/hidden" ] || fail "found none of the five libraries to hide"
while read -r f; do
    mount --bind /dev/null "$f"
done <"$out/hidden"
if "$sysbin" --version >/dev/null 2>&1; then
    fail "the system's dynamically linked fsdpconv still starts without the five libraries"
fi

"$venv/bin/pip" install --no-index --no-deps --disable-pip-version-check -q "$whl"
got=$("$venv/bin/fsdpconv" --version)
[ "$got" = "fsdpconv $version" ] || fail "fsdpconv --version says '$got', want 'fsdpconv $version'"
got=$("$venv/bin/python" -m fsdpconv --version)
[ "$got" = "fsdpconv $version" ] || fail "python -m fsdpconv --version says '$got'"
for page in man/*.1; do
    [ -f "$venv/share/man/man1/$(basename "$page")" ] || fail "$page is not in $venv/share/man/man1"
done
echo "wheel: pip installed it in a fresh venv with $(wc -l <"$out/hidden") library files hidden: $got (python -m fsdpconv too; man pages)"

# Step 2.
if unshare --root="$root" /bin/fsdpconv-system --version >/dev/null 2>&1; then
    fail "the system's dynamically linked fsdpconv starts in the glibc-only root"
fi
unshare --root="$root" "$venv/bin/fsdpconv" full-to-dcp --world-size 4 \
    --conv2d-to-linear patch_embed.weight --tie lm_head.weight=embed_tokens.weight \
    --dtype bfloat16 -o /out/dcp /fixtures/tiny_vitlm.pt >/dev/null
echo "wheel: converted the demo model for 4 ranks in a root holding only $interp and $(echo $needed)"
