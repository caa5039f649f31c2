"""Neighbour ranks for ``st.measure(colocated=N)``: ``python -m simtrain.calibrate.neighbour DEVICE GRID THREADS GROUPS``.

A neighbour runs the same compute benches as the measuring process, pass after pass, its results
discarded, until the measuring process kills it (``simtrain.calibrate.measure.neighbours`` starts
and stops them): the load the other ranks of a multi-process job on
one host put on the cores, caches and memory the measured rank shares with them. Each is its own
interpreter started by ``subprocess`` (not ``multiprocessing`` spawn, which re-imports the caller's
``__main__``: :mod:`simtrain.calibrate.worker` explains), so ``st.measure`` still works from a plain
script and a notebook.
"""

from __future__ import annotations

import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 4:
        print("usage: python -m simtrain.calibrate.neighbour DEVICE GRID THREADS GROUP[,GROUP…]", file=sys.stderr)
        return 2
    import torch  # noqa: F401  (imported before saying ready: the import is most of a start)

    from simtrain.calibrate.bench_ops import Bench
    from simtrain.calibrate.grids import grid_for
    from simtrain.calibrate.measure import _run_compute
    device, grid, threads, groups = args[0], args[1], int(args[2]), args[3].split(",")
    g = grid_for(grid, device)
    print("ready", flush=True)
    while True:  # until killed
        _run_compute(Bench(device, g.plan), g, groups, threads, lambda _m: None)


if __name__ == "__main__":
    sys.exit(main())
