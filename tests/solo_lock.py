"""Tests marked ``solo`` run while no other pytest-xdist worker runs a test.

Why: the validation suite's quick mode calibrates per-op costs on this machine and then times steps;
under ``pytest -n 2`` on a 2-core VM the other worker may load the second core during one phase and
not the other, which moved resnet18's predicted/measured step ratio from 0.26 (alone) to 0.07 and
to 10.1 (CI, 2026-12-06) — contention, not the model. Locking the machine for those tests removes
that term instead of widening the bound until it no longer catches anything.

How: a writer-preferring reader/writer lock on two files shared by the run's workers (``flock``):
every test holds the room shared; a solo test first takes the turnstile, so no new test enters while
it waits, then holds the room exclusively. Without xdist (one process) or without ``fcntl`` there is
nothing to lock against and the tests run as usual.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # not POSIX: no lock, the tests still run
    fcntl = None

__all__ = ["machine_turn"]


def _lock_paths(run_id: str) -> tuple[Path, Path]:
    base = Path(tempfile.gettempdir()) / f"simtrain-pytest-{run_id}"
    return base.with_suffix(".turnstile"), base.with_suffix(".room")


@contextlib.contextmanager
def machine_turn(run_id: str | None, solo: bool) -> Iterator[None]:
    """Hold the machine for one test: shared for an ordinary test, exclusive for a solo one.
    ``run_id`` is xdist's ``testrunuid`` (the same in every worker of one run); ``None`` locks nothing."""
    if run_id is None or fcntl is None:
        yield
        return
    turnstile_path, room_path = _lock_paths(run_id)
    with open(turnstile_path, "a+b") as turnstile, open(room_path, "a+b") as room:
        fcntl.flock(turnstile, fcntl.LOCK_EX)  # waits while a solo test is queued or running
        if not solo:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        fcntl.flock(room, fcntl.LOCK_EX if solo else fcntl.LOCK_SH)
        if solo:
            fcntl.flock(turnstile, fcntl.LOCK_UN)  # the room is ours; others queue on it
        try:
            yield
        finally:
            fcntl.flock(room, fcntl.LOCK_UN)
