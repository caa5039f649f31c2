"""``st.measure``: real PyTorch microbenchmarks of this machine → :class:`Measurements`; and the neighbour
ranks of ``st.measure(colocated=N)``.

Measuring
---------

``st.measure``: real PyTorch microbenchmarks of this machine → :class:`Measurements`.

    m = st.measure("cpu", quick=True)          # about a minute on two cores
    m.save("measurements.json"); st.calibrate(m)

Runs, in order, the matrix benches (GEMM, bmm, conv2d, attention; forward and backward), the vector
and memory benches (elementwise, norms, softmax, embedding, copies, optimizer step, host↔device on
CUDA) and the collectives (gloo / NCCL in child processes). The compute benches run with a fixed
``torch.set_num_threads(threads)`` (restored afterwards) that is recorded in the machine facts.

Neighbours
----------

Neighbour ranks for ``st.measure(colocated=N)``: ``python -m simtrain.calibrate.measure DEVICE GRID THREADS
GROUPS`` (:func:`neighbour_main`).

A neighbour runs the same compute benches as the measuring process, pass after pass, its results
discarded, until the measuring process kills it (:func:`neighbours` starts
and stops them): the load the other ranks of a multi-process job on
one host put on the cores, caches and memory the measured rank shares with them. Each is its own
interpreter started by ``subprocess`` (not ``multiprocessing`` spawn, which re-imports the caller's
``__main__``: :mod:`simtrain.calibrate.collectives_bench` explains under "Child processes"), so ``st.measure`` still works from a plain
script and a notebook.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from simtrain.calibrate.bench_memory import (
    bench_conv_layout,
    bench_first_touch,
    bench_rng,
    bench_step_state,
    last_level_cache_bytes,
)
from simtrain.calibrate.bench_ops import (
    GRID_NAMES,
    MATRIX_BENCHES,
    Bench,
    Grid,
    bench_autograd_call,
    grid_for,
)
from simtrain.calibrate.bench_rank_jitter import BENCH as JITTER_BENCH
from simtrain.calibrate.bench_rank_jitter import ROUNDS as JITTER_ROUNDS
from simtrain.calibrate.bench_rank_jitter import bench_rank_jitter
from simtrain.calibrate.bench_vector import VECTOR_BENCHES
from simtrain.calibrate.child_env import child_env
from simtrain.calibrate.collectives_bench import run_collectives
from simtrain.calibrate.machine import machine_facts
from simtrain.calibrate.records import Measurements, Row, Unsupported
from simtrain.calibrate.robust import (
    contention_between,
    measurements_contention,
    merge_passes,
    over_limit,
    quickest,
    snapshot,
    take,
    worst_slowdown,
)
from simtrain.errors import SpecError

__all__ = ["measure", "Measurements", "Row", "BENCH_GROUPS", "REMEASURE_ATTEMPTS", "REMEASURE_PAUSE_S",
           "neighbour_main"]


# ──── Measuring ─────────────────────────────────────────────────────────────────────────────────────

#: every benchmark group by name, in run order; ``only=`` selects a subset.
BENCH_GROUPS: dict[str, Callable[[Bench, Grid], list[Row]]] = {**MATRIX_BENCHES, **VECTOR_BENCHES,
                                                                "first_touch": bench_first_touch, "rng": bench_rng,
                                                                "conv_layout": bench_conv_layout,
                                                                "step_state": bench_step_state}
REMEASURE_ATTEMPTS = 2
"""Times a group measured in a slow spell is measured again (:mod:`simtrain.calibrate.robust`)."""
REMEASURE_PAUSE_S = 5.0
"""Pause before measuring slow groups again: spells on the shared VM last seconds to minutes."""


def _check_device(device: str) -> None:
    import torch
    if device not in ("cpu", "cuda"):
        raise SpecError.one(None, "device", f"must be 'cpu' or 'cuda', got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise SpecError.one(None, "device", "cuda requested but torch.cuda.is_available() is False")


_APART = ("collectives", JITTER_BENCH)
"""Groups that run outside the compute passes: the collectives after the neighbours stop, and the
rank-jitter bench, whose lockstep ranks are the neighbours (``colocated`` > 1 only)."""


def _groups(only: Iterable[str] | None, collectives: bool) -> tuple[list[str], bool, bool]:
    """(compute groups, run the collectives, run the rank-jitter bench) for ``only``."""
    names = list(BENCH_GROUPS) + list(_APART)
    chosen = names if only is None else list(only)
    unknown = [n for n in chosen if n not in names]
    if unknown:
        raise SpecError.one(None, "only", f"unknown bench groups {unknown}; known: {', '.join(names)}")
    return [n for n in chosen if n not in _APART], collectives and "collectives" in chosen, JITTER_BENCH in chosen


def _load() -> float:
    """1-minute load average (a busy machine makes noisy numbers: recorded, not judged)."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return -1.0


def _burn_in(device: str, seconds: float) -> None:
    """Run GEMMs for ``seconds`` before timing: wakes the thread pool, the clocks and (on CUDA) the
    context and cuBLAS handles, so the first benchmark is not charged for them."""
    import torch

    from simtrain.calibrate.bench_ops import synchronize
    a = torch.randn(512, 512, device=device)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        a @ a
        synchronize(device)
    torch.autograd.grad((a.requires_grad_() @ a).sum(), a)  # start autograd's worker threads too


def _attempt(bench: Bench, grid: Grid, name: str, log) -> tuple[list[Row], list[Row]]:
    """One group's rows and the sentinel readings that close it."""
    start = time.perf_counter()
    try:
        got = BENCH_GROUPS[name](bench, grid)
    except Exception as e:  # noqa: BLE001 - one group a device refuses must not lose the others
        log(f"warning: {name} failed and measured nothing ({type(e).__name__}: {e}); going on without its rows")
        got = []
    log(f"{name}: {len(got)} rows in {time.perf_counter() - start:.1f} s")
    return got, take(bench, name)


def _kept_readings(done: dict[str, tuple[list[Row], list[Row]]], opening: list[Row]) -> list[Row]:
    """Every sentinel reading kept so far: the opening ones and each group's closing ones."""
    return opening + [r for _, closing in done.values() for r in closing]


def _remeasure_slow(bench: Bench, grid: Grid, done: dict[str, tuple[list[Row], list[Row]]], opening: list[Row],
                    log, attempts: int = REMEASURE_ATTEMPTS, pause_s: float = REMEASURE_PAUSE_S) -> None:
    """Measure again, after a pause, each group whose closing sentinels were past a limit against the
    quickest readings so far; keep whichever attempt's sentinels were quicker (``done`` in place). A
    group that measured nothing here (host↔device copies on a CPU) is not measured again."""
    for _ in range(attempts):
        best = quickest(_kept_readings(done, opening))
        slow = {n: why for n, (got, closing) in done.items() if got and (why := over_limit(closing, best))}
        if not slow:
            return
        for name, why in slow.items():
            log(f"{name}: measured in a slow spell ({', '.join(why)}); measuring it again in {pause_s:.0f} s")
        time.sleep(pause_s)
        for name in slow:
            got, closing = _attempt(bench, grid, name, log)
            best = quickest(_kept_readings(done, opening) + closing)
            if worst_slowdown(closing, best) < worst_slowdown(done[name][1], best):
                done[name] = (got, closing)
    best = quickest(_kept_readings(done, opening))
    for name, (got, closing) in done.items():
        if got and (why := over_limit(closing, best)):
            log(f"warning: {name} measured on a contended machine ({', '.join(why)})")


def _run_compute(bench: Bench, grid: Grid, groups: list[str], threads: int, log) -> list[Row]:
    import torch
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    rows: list[Row] = []
    try:
        _burn_in(bench.device, 0.2 if grid.name == "tiny" else 1.0)
        opening = take(bench, "start")
        engine = bench_autograd_call(bench)
        rows += [*opening, engine]
        bench = replace(bench, autograd_call_s=engine.median_s)
        done = {name: _attempt(bench, grid, name, log) for name in groups}
        _remeasure_slow(bench, grid, done, opening, log)
        for got, closing in done.values():
            rows += got + closing
    finally:
        torch.set_num_threads(saved)
    return rows


def _check_colocated(colocated: int, device: str) -> None:
    """``colocated``: an integer from 1 to the core count, above 1 only on the CPU."""
    if isinstance(colocated, bool) or not isinstance(colocated, int) or not 1 <= colocated <= (os.cpu_count() or 1):
        raise SpecError.one(None, "colocated", f"must be an integer from 1 to this machine's {os.cpu_count()} "
                            f"cores, got {colocated!r}")
    if colocated > 1 and device != "cpu":
        raise SpecError.one(None, "colocated", f"ranks share a host's cores only on the CPU, not {device!r}")


NEIGHBOUR_MODULE = "simtrain.calibrate.measure"
"""The module each neighbour runs (``python -m``: :func:`neighbour_main`)."""
_STOP_TIMEOUT_S = 30.0


@contextmanager
def neighbours(count: int, device: str, grid: str, groups: list[str], threads: int):
    """``count`` neighbour processes running while the block runs (none when ``count`` < 1); yields
    their ``Popen`` handles. They are killed, and waited for, when the block ends."""
    cmd = [sys.executable, "-m", NEIGHBOUR_MODULE, device, grid, str(threads), ",".join(groups)]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=child_env(), text=True)
             for _ in range(max(0, count))]
    try:
        for p in procs:  # each says "ready" once torch is imported (or closes its output when it fails)
            p.stdout.readline()
        yield procs
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait(timeout=_STOP_TIMEOUT_S)
            p.stdout.close()


def _compute_passes(device: str, g: Grid, grid_name: str, groups: list[str], threads: int, passes: int,
                    colocated: int, log: Callable[[str], None]) -> list[Row]:
    """The compute grid timed ``passes`` times beside ``colocated − 1`` neighbours, merged into one
    row per benchmark (``robust.merge_passes``) when there is more than one pass."""
    runs = []
    with neighbours(colocated - 1, device, grid_name, groups, threads):
        if colocated > 1:
            log(f"{colocated - 1} neighbour process(es) running the same benches")
        for i in range(passes):
            if passes > 1:
                log(f"pass {i + 1} of {passes}")
            runs.append(_run_compute(Bench(device, g.plan), g, groups, threads, log))
    return merge_passes(runs) if passes > 1 else list(runs[0])


def _rank_jitter(colocated: int, threads: int, passes: int, log: Callable[[str], None]) -> list[Row]:
    """The lockstep bench's rows (calibrate/collectives_bench.py): ``JITTER_ROUNDS`` rounds per pass."""
    rounds = JITTER_ROUNDS * passes
    rows = bench_rank_jitter(colocated, threads, rounds)
    log(f"{JITTER_BENCH}: {colocated} ranks in lockstep, {rounds} rounds")
    return rows


def _checked_arguments(device: str, out, colocated: int, grid_name: str, passes: int) -> str:
    """Every argument check of :func:`measure`, before minutes of benchmarks; returns the grid name."""
    from simtrain.outputs import check_output_path
    if out is not None:
        check_output_path(out, "out", (".json", ".parquet"))
    _check_colocated(colocated, device)
    _check_device(device)
    if grid_name not in GRID_NAMES:
        raise SpecError.one(None, "grid", f"must be one of {', '.join(GRID_NAMES)}, got {grid_name!r}")
    if passes < 1:
        raise SpecError.one(None, "passes", f"must be at least 1, got {passes}")
    return grid_name


def _collectives(device: str, g, threads: int, log) -> tuple[list, list[Unsupported]]:
    """The collective benches (rows, what the backend refused), timed into the log."""
    t0 = time.perf_counter()
    rows, refused = run_collectives(device, g, threads=threads)
    log(f"collectives: {len(rows)} rows, {len(refused)} unsupported in {time.perf_counter() - t0:.1f} s")
    return rows, list(refused)


def measure(device: str = "cpu", quick: bool = False, out: str | Path | None = None,
            threads: int | None = None, grid: str | None = None, only: Iterable[str] | None = None,
            collectives: bool = True, collective_threads: int = 1,
            log: Callable[[str], None] | None = None, passes: int = 1, colocated: int = 1) -> Measurements:
    """Benchmark this machine's ``device`` ("cpu" or "cuda") with real PyTorch ops.

    ``grid`` is "tiny" | "quick" | "full" (default: "quick" if ``quick`` else "full"); ``threads`` the
    intra-op thread count for the compute benches (default: torch's current count); ``only`` a subset
    of :data:`BENCH_GROUPS` plus "collectives" and "rank_jitter"; ``collective_threads`` the torch threads of each
    collective rank. ``out``: also save the result there (JSON, or Parquet by suffix). ``passes``: time
    the compute grid that many times, one full pass after another, and keep per benchmark the trimmed
    mean of the pass medians (``robust.merge_passes``, ``robust.pass_centre``): on a shared machine the speed drifts over minutes,
    which repeats within one pass cannot average out. ``colocated``: how many ranks of a job share
    this host's CPU (DDP with one process per core): the compute benches then run while
    ``colocated − 1`` other processes run the same benches at ``threads`` threads each, so the rows
    carry what the neighbours take (shared caches, memory bandwidth, the hypervisor's cores) — the
    device a rank sees, not the machine alone. When the neighbours stop, ``colocated`` ranks run one
    workload in lockstep to measure how long a synchronous step waits for the slowest of them
    (``rank_jitter``, calibrate/collectives_bench.py; ``JITTER_ROUNDS`` rounds per pass); the collectives
    run last.
    """
    import torch

    grid_name = _checked_arguments(device, out, colocated, grid or ("quick" if quick else "full"), passes)
    g = grid_for(grid_name, device)
    threads = int(threads or torch.get_num_threads())
    log = log or (lambda msg: None)
    start, load_start, snap0 = time.perf_counter(), _load(), snapshot()
    if load_start > 0.25 * max(1, os.cpu_count() or 1):
        log(f"warning: load average {load_start} before measuring: other processes will skew the times")
    groups, run_coll, run_jitter = _groups(only, collectives)
    rows = _compute_passes(device, g, grid_name, groups, threads, passes, colocated, log)
    run_jitter = run_jitter and colocated > 1
    rows += _rank_jitter(colocated, threads, passes, log) if run_jitter else []
    coll_rows, refused = _collectives(device, g, collective_threads, log) if run_coll else ([], [])
    rows += coll_rows
    facts = machine_facts(device, threads)
    steal, other = contention_between(snap0, snapshot(), facts.cpu_cores)
    settings = {"grid": grid_name, "threads": threads, "collective_threads": collective_threads,
                "groups": ",".join(groups + (["collectives"] if run_coll else []) + ([JITTER_BENCH] if run_jitter else [])),
                "passes": passes,
                "plan": str(g.plan), "loadavg_1min_start": load_start, "loadavg_1min_end": _load(),
                "steal_fraction": steal, "other_cpu_fraction": other, "colocated": colocated,
                "llc_bytes": last_level_cache_bytes() if device == "cpu" else 0.0}
    m = Measurements(tuple(rows), facts, settings, tuple(refused), wall_s=time.perf_counter() - start)
    verdict = measurements_contention(m)
    for reason in verdict.reasons:
        log(f"warning: unreliable measurement: {reason}")
    if out is not None:
        m.save(out)
    return m


# ──── Neighbours ────────────────────────────────────────────────────────────────────────────────────

def neighbour_main(argv: list[str] | None = None) -> int:
    """One neighbour: the compute benches of ``GROUPS`` on ``DEVICE`` over grid ``GRID`` with ``THREADS``
    threads, pass after pass, until killed."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 4:
        print("usage: python -m simtrain.calibrate.measure DEVICE GRID THREADS GROUP[,GROUP…]", file=sys.stderr)
        return 2
    import torch  # noqa: F401  (imported before saying ready: the import is most of a start)
    device, grid, threads, groups = args[0], args[1], int(args[2]), args[3].split(",")
    g = grid_for(grid, device)
    print("ready", flush=True)
    while True:  # until killed
        _run_compute(Bench(device, g.plan), g, groups, threads, lambda _m: None)


if __name__ == "__main__":
    sys.exit(neighbour_main())
