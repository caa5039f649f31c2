"""The simulator's timeline and its export as Chrome / Perfetto trace-event JSON.

One process (pid) per pipeline rank, one thread (tid) per lane — compute, pp_send_fw, pp_send_bw,
dp_comm — so events on a track never overlap (Perfetto requires perfect nesting, ecosystem.md §1).
Timestamps in microseconds, complete events (``ph: "X"``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["TimelineEvent", "Timeline", "LANES"]

LANES = ("compute", "pp_send_fw", "pp_send_bw", "dp_comm")


@dataclass(frozen=True, slots=True)
class TimelineEvent:
    name: str
    rank: int
    lane: str
    start_s: float
    dur_s: float
    args: dict = field(default_factory=dict)

    @property
    def end_s(self) -> float:
        return self.start_s + self.dur_s


@dataclass(frozen=True)
class Timeline:
    events: tuple[TimelineEvent, ...]

    def log(self) -> list[tuple[str, int, float, float]]:
        """(name, rank, start, end) in time order — what event-log tests assert."""
        return [(e.name, e.rank, e.start_s, e.end_s) for e in self.events]

    def to_chrome_trace(self, path: str | Path | None = None) -> dict:
        ranks = sorted({e.rank for e in self.events})
        trace = []
        for r in ranks:
            trace.append({"ph": "M", "name": "process_name", "pid": r, "args": {"name": f"rank {r} (stage {r})"}})
            trace.append({"ph": "M", "name": "process_sort_index", "pid": r, "args": {"sort_index": r}})
            for tid, lane in enumerate(LANES):
                trace.append({"ph": "M", "name": "thread_name", "pid": r, "tid": tid, "args": {"name": lane}})
                trace.append({"ph": "M", "name": "thread_sort_index", "pid": r, "tid": tid, "args": {"sort_index": tid}})
        for e in self.events:
            trace.append({"ph": "X", "name": e.name, "cat": e.lane, "pid": e.rank, "tid": LANES.index(e.lane),
                          "ts": e.start_s * 1e6, "dur": e.dur_s * 1e6, "args": dict(e.args)})
        doc = {"traceEvents": trace, "displayTimeUnit": "ms", "otherData": {"producer": "simtrain.simulate"}}
        if path is not None:
            Path(path).write_text(json.dumps(doc))
        return doc
