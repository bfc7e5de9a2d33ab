"""``python -m tui`` and the ``tokenstep`` console script."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
