"""fsdpconv: the wheel installs the C binary `fsdpconv` in the environment's bin/.

`binary()` is its path, for `subprocess.run([fsdpconv.binary(), ...])` from training code;
`python -m fsdpconv ARGS` runs it. There is no Python implementation of the converter.
"""

import os
import sysconfig


def binary():
    """Path of the fsdpconv binary installed with this package; raises FileNotFoundError."""
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [
        sysconfig.get_path("scripts"),  # a venv or the interpreter's prefix
        sysconfig.get_path("scripts", "posix_user"),  # pip install --user
        os.path.join(os.path.dirname(here), "bin"),  # pip install --target DIR
    ]
    for d in candidates:
        path = os.path.join(d, "fsdpconv")
        if os.access(path, os.X_OK):
            return path
    raise FileNotFoundError("fsdpconv: the fsdpconv binary is in none of %s; reinstall the "
                            "wheel (pip install --force-reinstall fsdpconv)" % ", ".join(candidates))
