"""The wheel's build step (the rest is in pyproject.toml).

`make WHEEL=1 wheel-bin` builds build/wheel/fsdpconv, the CPU binary with its libraries linked
statically and glibc's symbol versions held at WHEEL_GLIBC (see the Makefile). It goes into
the wheel's scripts, so pip puts the binary itself (no Python wrapper) in the venv's bin/; the
man pages go to share/man/man1. The wheel is tagged with the manylinux tag of the newest glibc
symbol version the binary needs, the one `auditwheel show` reports.
"""

import glob
import os
import platform
import re
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.bdist_wheel import bdist_wheel
from distutils.command.build_scripts import build_scripts  # setuptools' copy of distutils

BIN = os.path.join("build", "wheel", "fsdpconv")
WHEEL_HINT = "or pip install the prebuilt fsdpconv wheel, which needs no compiler"


def build_binary():
    # One line naming what is missing, never a page of compiler or linker errors: the checks
    # (config-summary) run alone before anything compiles.
    for tool in ("make", "cc"):
        if shutil.which(tool) is None:
            sys.exit("fsdpconv: building from source needs %s and the static libraries of "
                     "libzstd-dev libdeflate-dev libjansson-dev libpcre2-dev libssl-dev; %s"
                     % (tool, WHEEL_HINT))
    # WERROR=0 even inside `make WERROR=1 test`: warnings are for CI's gcc build, and a user's
    # pip install must not fail on a warning a newer clang (zig cc) adds.
    make = ["make", "--no-print-directory", "WHEEL=1", "WERROR=0",
            "WHEEL_PYTHON=" + sys.executable]
    r = subprocess.run(make + ["config-summary"], stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        lines = r.stderr.strip().splitlines() or ["make WHEEL=1 config-summary failed"]
        sys.exit(lines[0])
    r = subprocess.run(make + ["-j%d" % (os.cpu_count() or 1), "wheel-bin"])
    if r.returncode != 0:
        sys.exit("fsdpconv: make WHEEL=1 wheel-bin failed (exit %d)" % r.returncode)


def manylinux_tag(path):
    out = subprocess.run(["readelf", "-V", "-W", path], capture_output=True, text=True,
                         check=True).stdout
    versions = [tuple(map(int, v)) for v in re.findall(r"Name: GLIBC_(\d+)\.(\d+)", out)]
    if not versions:
        sys.exit("fsdpconv: %s needs no versioned glibc symbol; not the binary make built" % path)
    major, minor = max(versions)
    return "manylinux_%d_%d_%s" % (major, minor, platform.machine())


class BuildScripts(build_scripts):
    """Copies the ELF binary as it is (build_scripts would look for a #! line to rewrite)."""

    def run(self):
        build_binary()
        self.mkpath(self.build_dir)
        self.copy_file(BIN, os.path.join(self.build_dir, "fsdpconv"))


class BdistWheel(bdist_wheel):
    """A native binary, no Python ABI: py3-none-manylinux_X_Y_<arch>."""

    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        return "py3", "none", manylinux_tag(BIN)


setup(
    scripts=[BIN],
    data_files=[("share/man/man1", sorted(glob.glob("man/*.1")))],
    cmdclass={"build_scripts": BuildScripts, "bdist_wheel": BdistWheel},
)
