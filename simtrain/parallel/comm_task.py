"""The record every collective of the program is: which group, what kind, in which phase, its bytes and
seconds, and how much compute can hide it (parallel/comm_tasks.py and parallel/fsdp_comm.py issue them;
the estimate, the simulator and the vectorized sweep read them)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

__all__ = ["CommTask"]


@dataclass(frozen=True)
class CommTask:
    """One collective (or send) a rank issues per micro-batch in a phase, or per step for dp."""

    axis: str
    kind: str
    phase: str
    bytes: float
    seconds: float
    count: int = 1
    overlap_s: float = 0.0
    """Compute it can hide behind (ring attention, ZeRO-3 prefetch); exposed = max(0, s·count − overlap)."""
    slowdown: float = 0.0
    """The stack's comm/compute interference: the hidden part still costs slowdown × its seconds."""

    @functools.cached_property
    def total_s(self) -> float:
        return self.seconds * self.count

    @functools.cached_property
    def exposed_s(self) -> float:
        hidden = min(self.total_s, self.overlap_s)
        return max(0.0, self.total_s - self.overlap_s) + self.slowdown * hidden
