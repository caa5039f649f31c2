"""Shared-bandwidth links for the simulator: processor sharing (Kleinrock 1967; the fluid model of
TCP/NCCL flows on one NIC, e.g. Rajasekaran et al. 2024 "CASSINI" §3).

A flow carries *work* measured in uncontended seconds — the seconds the cost layer gives the
collective or copy when it has the link to itself (cost/collectives.py, cost/data_pipeline.py) —
so the simulator uses the same cost rules as the estimate and never re-derives a bandwidth. While
n flows are active on a link each advances at 1/n of a second per second (fair share of the
bandwidth). Whenever a flow starts or ends the remaining work of every active flow is brought up
to date and the next completion is rescheduled: O(active flows) per start / end, nothing per tick.

Two equal flows of T seconds started together both finish at 2T; a flow of T₁ and one of T₂ > T₁
started together finish at 2T₁ and T₁ + T₂ (after 2T₁ the second has T₂ − T₁ left, at full rate).
"""

from __future__ import annotations

import simpy

__all__ = ["SharedLink"]

_EPS_S = 1e-15
"""Remaining work below this (seconds) counts as done: absorbs float rounding of the share updates."""


class _Flow:
    __slots__ = ("remaining_s", "done", "name")

    def __init__(self, env: simpy.Environment, work_s: float, name: str) -> None:
        self.remaining_s, self.done, self.name = work_s, env.event(), name


class SharedLink:
    """One link (NIC, fabric port, storage device, host-to-device copy engine) shared fairly by the
    flows on it. ``transfer(work_s)`` returns an event that fires when the flow has received
    ``work_s`` seconds of full-link service."""

    def __init__(self, env: simpy.Environment, name: str) -> None:
        self.env, self.name = env, name
        self._active: list[_Flow] = []
        self._updated_s = 0.0
        self._version = 0
        self.max_concurrent = 0
        """The most flows this link carried at once (1: nothing ever contended on it)."""

    def transfer(self, work_s: float, name: str = "") -> simpy.Event:
        flow = _Flow(self.env, float(work_s), name)
        if flow.remaining_s <= _EPS_S:
            flow.done.succeed()
            return flow.done
        self._advance()
        self._active.append(flow)
        self.max_concurrent = max(self.max_concurrent, len(self._active))
        self._reschedule()
        return flow.done

    def _advance(self) -> None:
        """Charge every active flow its share of the time since the last update."""
        now = self.env.now
        if self._active and now > self._updated_s:
            share = (now - self._updated_s) / len(self._active)
            for f in self._active:
                f.remaining_s -= share
        self._updated_s = now

    def _reschedule(self) -> None:
        self._version += 1
        if not self._active:
            return
        first = min(f.remaining_s for f in self._active)
        wake = self.env.timeout(max(0.0, first) * len(self._active))
        version = self._version
        wake.callbacks.append(lambda _ev: self._on_wake(version))

    def _on_wake(self, version: int) -> None:
        if version != self._version:  # a start or end since then rescheduled this link
            return
        self._advance()
        finished = [f for f in self._active if f.remaining_s <= _EPS_S * max(1.0, len(self._active))]
        if not finished:  # rounding left a sliver: finish the closest one
            finished = [min(self._active, key=lambda f: f.remaining_s)]
        for f in finished:
            self._active.remove(f)
            f.done.succeed()
        self._reschedule()
