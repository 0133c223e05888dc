"""``python -m moirae.cli``: the same as the ``moirae`` console script."""

import sys

from moirae.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
