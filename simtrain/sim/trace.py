"""The simulator's timeline and its exports: Chrome / Perfetto trace-event JSON and a Gantt PNG.

A :class:`TimelineEvent` is one slice of work: ``name``, ``rank`` (the pipeline rank, which stands
for its whole equivalence class: the dp × tp × cp ranks of that stage do the same), ``lane`` (the
stream it ran on, also readable as ``stream``), ``start_s`` and ``dur_s`` (``end_s`` derived), and
optional ``args``. Lanes: "compute"; an axis's blocking collectives "tp" / "cp" / "ep" / "dp" /
"stream"; what runs behind compute "<axis> overlapped"; "pp fw send" / "pp bw send"; "dp sync" (the
per-step gradient reduction and parameter gathers). Slices on one (rank, lane) never overlap.

A :class:`Flow` joins a pipeline send to the task it feeds on the next rank (Perfetto draws an
arrow: trace events ``ph: "s"`` at the send, ``ph: "f"`` with ``bp: "e"`` at the receiving task).
Timestamps in the JSON are microseconds; slices are complete events (``ph: "X"``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

__all__ = ["TimelineEvent", "Flow", "Timeline", "LANES"]

LANES = ("compute", "tp", "cp", "ep", "dp", "stream", "pp fw send", "pp bw send", "tp overlapped",
         "cp overlapped", "ep overlapped", "dp overlapped", "stream overlapped", "dp sync")
"""Track order in a trace (a lane not listed here follows, alphabetically)."""

_NO_ARGS: Mapping = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class TimelineEvent:
    name: str
    rank: int
    lane: str
    start_s: float
    dur_s: float
    args: Mapping = field(default_factory=lambda: _NO_ARGS)

    @property
    def end_s(self) -> float:
        return self.start_s + self.dur_s

    @property
    def stream(self) -> str:
        return self.lane


@dataclass(frozen=True, slots=True)
class Flow:
    """A pipeline send from (src_rank, src_lane) at ``src_s`` to the task on dst_rank starting at ``dst_s``."""

    name: str
    src_rank: int
    src_lane: str
    src_s: float
    dst_rank: int
    dst_lane: str
    dst_s: float


@dataclass(frozen=True)
class Timeline:
    events: tuple[TimelineEvent, ...]
    flows: tuple[Flow, ...] = ()
    memory_peak_bytes: tuple[float, ...] = ()
    """Per pipeline rank: the device-memory peak the run reached (static + activations in flight)."""
    link_max_concurrent: Mapping = field(default_factory=dict)
    """Per link name: the most flows that shared it at once (1: it never contended)."""

    def log(self) -> list[tuple[str, int, float, float]]:
        """(name, rank, start, end) in time order — what event-log tests assert."""
        return [(e.name, e.rank, e.start_s, e.end_s) for e in self.events]

    def lanes(self) -> list[str]:
        used = {e.lane for e in self.events}
        return [ln for ln in LANES if ln in used] + sorted(used - set(LANES))

    def to_chrome_trace(self, path: str | Path | None = None) -> dict:
        """Trace-event JSON (Chrome ``about:tracing``, https://ui.perfetto.dev): a process per pipeline
        rank, a thread per lane, a slice per event, an arrow per pipeline send. ``path``: also write
        it there (a ``.json`` file, checked first: simtrain/outputs.py)."""
        if path is not None:
            from simtrain.outputs import JSON_SUFFIXES, check_output_path
            path = check_output_path(path, "path", JSON_SUFFIXES)
        lanes = self.lanes()
        tid = {ln: i for i, ln in enumerate(lanes)}
        trace: list[dict] = []
        for r in sorted({e.rank for e in self.events}):
            trace.append({"ph": "M", "name": "process_name", "pid": r, "args": {"name": f"pipeline rank {r}"}})
            trace.append({"ph": "M", "name": "process_sort_index", "pid": r, "args": {"sort_index": r}})
            for ln in lanes:
                trace.append({"ph": "M", "name": "thread_name", "pid": r, "tid": tid[ln], "args": {"name": ln}})
                trace.append({"ph": "M", "name": "thread_sort_index", "pid": r, "tid": tid[ln],
                              "args": {"sort_index": tid[ln]}})
        for e in self.events:
            trace.append({"ph": "X", "name": e.name, "cat": e.lane, "pid": e.rank, "tid": tid[e.lane],
                          "ts": e.start_s * 1e6, "dur": e.dur_s * 1e6, "args": dict(e.args)})
        for i, f in enumerate(self.flows):
            if f.src_lane in tid and f.dst_lane in tid:
                trace.append({"ph": "s", "id": i, "name": f.name, "cat": "pp", "pid": f.src_rank,
                              "tid": tid[f.src_lane], "ts": f.src_s * 1e6})
                trace.append({"ph": "f", "bp": "e", "id": i, "name": f.name, "cat": "pp", "pid": f.dst_rank,
                              "tid": tid[f.dst_lane], "ts": f.dst_s * 1e6})
        doc = {"traceEvents": trace, "displayTimeUnit": "ms", "otherData": {"producer": "simtrain.simulate"}}
        if path is not None:
            Path(path).write_text(json.dumps(doc))
        return doc

    def to_gantt_png(self, path: str | Path, lanes: tuple[str, ...] = ("compute",), dpi: int = 120) -> Path:
        """A pipeline Gantt chart (matplotlib, Agg): one row per rank (per rank and lane when more
        lanes are asked for), forward slices blue, backward green, recomputation orange, the rest grey."""
        from simtrain.outputs import IMAGE_SUFFIXES, check_output_path
        from simtrain.sim.gantt import gantt_png
        return gantt_png(self, check_output_path(path, "path", IMAGE_SUFFIXES), lanes, dpi)
