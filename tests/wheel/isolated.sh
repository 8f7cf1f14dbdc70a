#!/bin/sh
# Runs inside `unshare --mount` (tests/wheel/run.sh), in three steps that each take more away:
#  1. no -dev packages: /dev/null is bind-mounted over the static archives and headers of
#     zstd, libdeflate, jansson, PCRE2 and libcrypto; a source build (pip wheel . in a fresh
#     copy of the sources) must stop with the one line that names the missing archives;
#  2. none of the five libraries: /dev/null over their shared libraries too; the system's
#     dynamically linked build no longer starts, pip installs the wheel into a fresh venv, and
#     fsdpconv --version, python -m fsdpconv --version and the man pages are checked;
#  3. glibc only: the demo conversion runs chrooted (unshare --root) in minimal roots that hold
#     the venv, the input, the output dir and glibc, nothing else: this machine's loader and
#     the glibc libraries the wheel's binary names (readelf -d), then Debian bullseye's glibc
#     2.31 (OLD_GLIBC, tests/setup/old_glibc.sh), older than the glibc the wheel was built on.
#     The system's build fails to start in either.
# Every mount and copy is done before step 2: mount, cp, sed and grep need libpcre2-8.
# usage: isolated.sh WHEEL VENV SYSTEM_FSDPCONV OUT_DIR VERSION BUILD_VENV OLD_GLIBC
# (from the repository root)
set -eu
whl=$1 venv=$2 sysbin=$3 out=$4 version=$5 bv=$6 old_glibc=$7

fail() {
    echo "wheel: $*" >&2
    exit 1
}

# The minimal roots. The venv and out dirs are bind-mounted: they show the wheel pip installs
# later, and the DCP written in a root lands in $out.
bin="$out/fsdpconv" # run.sh took it out of the wheel
needed=$(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
interp=$(readelf -l "$bin" | sed -n 's/.*Requesting program interpreter: \(.*\)\]/\1/p')
libdir=$(dirname "$(readlink -f "$(cc -print-file-name=libc.so.6)")")
make_root() { # $1: the root, holding its glibc already
    mkdir -p "$1$venv" "$1/fixtures" "$1/out" "$1/bin"
    cp "$sysbin" "$1/bin/fsdpconv-system"
    cp fixtures/full/tiny_vitlm.pt "$1/fixtures/"
    mount --bind "$venv" "$1$venv"
    mount --bind "$out" "$1/out"
}
mkdir -p "$out/root$libdir" "$out/root$(dirname "$interp")"
for lib in $needed; do
    cp -L "$libdir/$lib" "$out/root$libdir/" || fail "the wheel's binary needs $lib, not in $libdir"
done
cp -L "$interp" "$out/root$interp"
make_root "$out/root"
old_version=$(basename "$(ls "$old_glibc"/lib/*/libc-*.so)" .so)
cp -a "$old_glibc" "$out/root-old"
make_root "$out/root-old"
# A fresh checkout for the source build.
mkdir "$out/src"
cp -r Makefile VERSION pyproject.toml setup.py MANIFEST.in README.md python lib convert kernels \
    cmd man "$out/src/"

# The five libraries' files: -dev ones (archives, headers, the unversioned .so links' targets
# are the runtime files) to $out/dev, shared libraries to $out/shared, pcre2's last.
ma=$(cc -print-multiarch)
for d in /lib /usr/lib /usr/local/lib "/lib/$ma" "/usr/lib/$ma" "/usr/local/lib/$ma"; do
    for f in "$d"/libzstd.* "$d"/libdeflate.* "$d"/libjansson.* "$d"/libcrypto.* "$d"/libpcre2-8.*; do
        [ -f "$f" ] && readlink -f "$f"
    done
done | sort -u >"$out/libs"
for d in /usr/include /usr/local/include "/usr/include/$ma"; do
    for f in "$d"/zstd.h "$d"/zstd_errors.h "$d"/zdict.h "$d"/libdeflate.h "$d"/jansson.h \
        "$d"/jansson_config.h "$d"/pcre2.h "$d"/openssl/*.h; do
        [ -f "$f" ] && readlink -f "$f"
    done
done | sort -u >"$out/dev"
awk '/\.a$/' "$out/libs" >>"$out/dev"
awk '/\.so/ && !/libpcre2-8/' "$out/libs" >"$out/shared"
awk '/\.so/ && /libpcre2-8/' "$out/libs" >>"$out/shared"
[ -s "$out/shared" ] && [ -s "$out/dev" ] || fail "found none of the five libraries to hide"

# Step 1.
while read -r f; do
    mount --bind /dev/null "$f"
done <"$out/dev"
if (cd "$out/src" && "$bv/bin/pip" wheel --no-build-isolation --no-deps \
    --disable-pip-version-check -q -w "$out/nodev" . >"$out/nodev.log" 2>&1); then
    fail "pip wheel . built without the static libraries"
fi
# A compiler or linker message, or more than 30 lines, is the page of errors it must not be.
want="fsdpconv: the source build needs the static libraries libzstd.a libdeflate.a libjansson.a libpcre2-8.a libcrypto.a "
said=$(awk -v want="$want" 'index($0, want) { line = $0; sub(/^ */, "", line) }
    /undefined reference|\.[ch]:[0-9]+:[0-9]+: |ld(\.lld)?: error/ { bad = 1 }
    END { if (line == "" || bad || NR > 30) exit 1; print substr(line, 1, 72) }' "$out/nodev.log") ||
    fail "pip wheel . without the static libraries: no one line '$want...', or compiler output (see $out/nodev.log)"
echo "wheel: without the -dev packages a source build stops with: $said..."

# Step 2.
while read -r f; do
    mount --bind /dev/null "$f"
done <"$out/shared"
if "$sysbin" --version >/dev/null 2>&1; then
    fail "the system's dynamically linked fsdpconv still starts without the five libraries"
fi
"$venv/bin/pip" install --no-index --no-deps --disable-pip-version-check -q "$whl"
got=$("$venv/bin/fsdpconv" --version)
[ "$got" = "fsdpconv $version" ] || fail "fsdpconv --version says '$got', want 'fsdpconv $version'"
got=$("$venv/bin/python" -m fsdpconv --version)
[ "$got" = "fsdpconv $version" ] || fail "python -m fsdpconv --version says '$got'"
for page in man/*.1; do
    [ -f "$venv/share/man/man1/${page#man/}" ] || fail "$page is not in $venv/share/man/man1"
done
echo "wheel: pip installed it in a fresh venv without the five libraries: $got (python -m fsdpconv too; man pages)"

# Step 3.
convert() { # $1: root, $2: output dir name
    if unshare --root="$1" /bin/fsdpconv-system --version >/dev/null 2>&1; then
        fail "the system's dynamically linked fsdpconv starts in $1"
    fi
    unshare --root="$1" "$venv/bin/fsdpconv" full-to-dcp --world-size 4 \
        --conv2d-to-linear patch_embed.weight --tie lm_head.weight=embed_tokens.weight \
        --dtype bfloat16 -o "/out/$2" /fixtures/tiny_vitlm.pt >"$out/$2.log" 2>&1 ||
        { cat "$out/$2.log" >&2; fail "full-to-dcp in $1 failed"; }
}
convert "$out/root" dcp
echo "wheel: converted the demo model for 4 ranks in a root holding only" $needed
convert "$out/root-old" dcp-old
echo "wheel: and in a root holding only Debian bullseye's ${old_version#libc-}"
