"""``python -m validation [--quick] [--device cpu|cuda] [--out DIR] [--measurements PATH]``: the suite."""

from __future__ import annotations

import sys

from validation.cli import main

if __name__ == "__main__":
    sys.exit(main())
