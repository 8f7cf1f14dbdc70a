"""`python -m fsdpconv ARGS`: replaces this process with the installed fsdpconv binary."""

import os
import sys

from fsdpconv import binary


def main():
    try:
        path = binary()
    except FileNotFoundError as e:
        sys.stderr.write("%s\n" % e)
        sys.exit(1)
    os.execv(path, [path] + sys.argv[1:])


if __name__ == "__main__":
    main()
