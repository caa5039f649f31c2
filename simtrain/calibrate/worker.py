"""One collective-benchmark rank, run as its own interpreter: ``python -m simtrain.calibrate.worker JOB RANK``.

Why a module run by ``subprocess`` and not ``multiprocessing`` spawn: spawn re-imports the caller's
``__main__`` in every child, so ``st.measure`` called at the top level of a plain script (no
``if __name__ == "__main__":`` guard) re-runs the script in each child and crashes, and in a notebook
``__main__`` has no file to re-import. A child started as ``python -m simtrain.calibrate.worker`` imports
only simtrain, whatever the parent is.

``JOB`` is a JSON file written by :func:`simtrain.calibrate.collectives_bench.run_collectives`:
``{"world", "backend", "device", "init_file", "out", "job"}``; ``RANK`` the rank of this process.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m simtrain.calibrate.worker JOB.json RANK", file=sys.stderr)
        return 2
    spec = json.loads(Path(args[0]).read_text())
    from simtrain.calibrate.collectives_bench import rank_main
    rank_main(int(args[1]), int(spec["world"]), spec["backend"], spec["device"], spec["init_file"],
              spec["job"], spec["out"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
