"""Measured seconds per op class from a PyTorch profiler trace: ``read_profiler_trace(path)`` → :class:`TraceTimes`.

The input is what ``torch.profiler.profile(...).export_chrome_trace(path)`` writes (Chrome trace
JSON, optionally gzipped): complete events (``"ph": "X"``) with a start ``ts`` and a duration
``dur`` in microseconds, per process / thread. Mapping and counting rules:

* **One mapping.** An ATen op ``aten::NAME`` gets the op class of simtrain's own import rule for
  ``NAME`` (:func:`simtrain.graph.aten.rule_for`, the rule :func:`Model.from_torch` prices it with),
  read by :func:`op_class_of`. There is no second name table here.
* **Top-level units, no double counting.** Nesting is read from the trace itself (ts / dur
  containment per thread). A *unit* is an outermost ``aten::`` op, or an outermost autograd node
  (``autograd::engine::evaluate_function: …Backward0``); its whole duration counts once, its
  children never on their own. Like the importer, which names one torch call by the highest-ranked
  class of its ATen ops (:data:`~simtrain.graph.aten.CLASS_RANK`), a unit takes the highest-ranked
  class among the ruled ATen ops inside it (``aten::linear`` → ``addmm`` → matmul; ``AddmmBackward0``
  → ``mm`` + ``sum`` → matmul).
* **Optimizer.** Everything inside ``Optimizer.step#…`` and ``Optimizer.zero_grad#…`` (the
  annotations ``torch.optim`` records) is the group ``optimizer`` — simtrain prices the update
  apart from the op classes (``time_breakdown_s["optimizer"]``).
* A unit with no ruled ATen op inside is ``unmapped`` (its root names are kept); time between units
  (Python, the autograd engine's own work) is not in any group: ``gap_s`` says how much.
* **Steps.** ``ProfilerStep#N`` annotations (``prof.step()`` with a schedule) or, failing that, one
  step per ``Optimizer.step#`` annotation; ``steps=`` must agree when both are known. With three
  or more marked steps each group's time is its median over the steps (robust to a step another
  process interrupted), otherwise the mean.

Untrusted input: the file is size-capped (:data:`MAX_TRACE_BYTES`), must be a regular file, and a
malformed document or event raises :class:`~simtrain.errors.SpecError` naming the file, the event
and the field. GPU kernel events are refused: device time needs kernel-to-op correlation, which
this reader does not do.
"""

from __future__ import annotations

import functools
import math
import os
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from simtrain.calibrate.trace_file import load_trace_document
from simtrain.errors import SimtrainError, SpecError
from simtrain.glossary import OpClass

__all__ = ["TraceTimes", "CallTime", "read_profiler_trace", "trace_times", "op_class_of", "MAX_TRACE_BYTES",
           "OPTIMIZER", "UNMAPPED"]

MAX_TRACE_BYTES = 256 * 2**20
"""Largest trace read (bytes, after decompression): a few hundred training steps of a mid-sized model."""

OPTIMIZER = "optimizer"
UNMAPPED = "unmapped"
_OPT_PREFIXES = ("Optimizer.step#", "Optimizer.zero_grad#")
_AUTOGRAD_NODE = "autograd::engine::evaluate_function:"
_EPS_US = 0.01
"""Containment slack (µs): the profiler rounds ts and dur to ns, so a child may end a hair after its parent."""
_ROBUST_STEPS = 3
"""With at least this many marked steps, a group's time is its median over the steps, else the mean."""
_GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver"})


@dataclass(frozen=True)
class CallTime:
    """One forward call of a step (an outermost ATen op outside the optimizer) and the backward nodes
    autograd made of it (matched by sequence number): seconds per step, median over the marked steps."""

    root: str
    """The call's outermost ATen op, e.g. ``aten::conv2d``."""
    group: str
    """Its op class (``unmapped`` when no ruled ATen op is inside)."""
    fw_s: float
    bw_s: float
    bw_units: float = 0.0
    """Backward nodes per step counted in ``bw_s``."""


@dataclass(frozen=True)
class TraceTimes:
    """Measured seconds per step of each group (op classes, ``optimizer``, ``unmapped``)."""

    seconds: dict[str, float]
    """Seconds per step per group: the median over the marked steps when there are ≥ 3 (a step that
    a busy machine interrupted moves nothing), else the mean."""
    steps: int
    step_s: float | None
    """Median (≥ 3 steps) or mean wall seconds of one step (ProfilerStep spans, else Optimizer.step
    to Optimizer.step), None without markers."""
    units: dict[str, float]
    """Mean top-level units per step per group (op calls, autograd nodes)."""
    per_step: tuple[dict[str, float], ...] = ()
    """Seconds per group of each marked step (empty without step markers)."""
    unmapped_names: tuple[str, ...] = ()
    source: str = ""
    calls: tuple[CallTime, ...] = ()
    """The forward calls of one step in order, each with its backward (empty when the steps' forward
    calls do not line up: see :func:`_calls`)."""

    @property
    def attributed_s(self) -> float:
        return sum(self.seconds.values())

    @property
    def gap_s(self) -> float | None:
        """Per-step wall time outside every unit (Python, the autograd engine), None without markers."""
        return None if self.step_s is None else max(0.0, self.step_s - self.attributed_s)

    def relative_spread(self, group: str) -> float | None:
        """Standard error of the mean of ``group``'s per-step seconds, relative (None with < 2 steps)."""
        xs = [s.get(group, 0.0) for s in self.per_step]
        if len(xs) < 2 or not self.seconds.get(group):
            return None
        mean = sum(xs) / len(xs)
        var = sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)
        return math.sqrt(var / len(xs)) / mean if mean > 0 else None


# ----------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=4096)
def op_class_of(name: str) -> OpClass | None:
    """The op class simtrain's ATen rule gives ``name`` (``"mm"``, ``"aten::addmm"``), None when no rule.

    A rule maps a captured event (shapes) to a cost; the class it returns does not depend on the
    shapes, so the rule is evaluated once on a probe event of generic tensors (ranks 2, 3, 4 until
    one fits the rule's unpacking) — the importer's own mapping, read rather than copied."""
    from simtrain.graph.aten import rule_for
    rule = rule_for(name.removeprefix("aten::"))
    if rule is None:
        return None
    for rank in (2, 3, 4):
        try:
            return rule(_probe(name.removeprefix("aten::"), rank)).op_class
        except (AttributeError, IndexError, TypeError, ValueError, ZeroDivisionError, KeyError):
            continue
    raise SimtrainError(f"the ATen rule of {name!r} cannot be probed for its op class")  # a rule-writing bug


def _probe(name: str, rank: int):
    from simtrain.graph.capture.events import AtenEvent, TensorMeta
    meta = TensorMeta(vn=0, shape=(2,) * rank, dtype="float32", itemsize=4, floating=True, storage=0,
                      storage_elems=2 ** rank)

    class _Probe(AtenEvent):
        __slots__ = ()

        def tensor(self, _name):
            return meta

        def arg(self, _name, default=None):
            return default

        @property
        def inputs(self):
            return [meta, meta]

    return _Probe(index=0, name=name, overload="default", phase="fw", call=None, args={}, outs=(meta,) * 3)


def _sequence_number(ev: dict) -> int | None:
    """The autograd sequence number the profiler records on an op (``args["Sequence number"]``): a
    forward op and the backward node autograd made of it carry the same one. Absent or malformed → None
    (it only refines attribution, so a trace without it is still read)."""
    args = ev.get("args")
    seq = args.get("Sequence number") if isinstance(args, dict) else None
    return seq if isinstance(seq, int) and not isinstance(seq, bool) and seq >= 0 else None


def _events(doc, where: str) -> list[tuple[str, float, float, object, str, int | None]]:
    """(name, ts µs, dur µs, thread key, cat, sequence number) of every complete event; bad events raise."""
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise SpecError.one(where, "traceEvents", "not a profiler trace: no list of trace events "
                            "(write one with torch.profiler.profile(...).export_chrome_trace(path))")
    out = []
    for i, ev in enumerate(events):
        if not isinstance(ev, dict):
            raise SpecError.one(where, f"traceEvents[{i}]", "each trace event must be a JSON object")
        if ev.get("ph") != "X" or ev.get("pid") == "Spans":
            continue
        name, cat, ts, dur = ev.get("name"), ev.get("cat", ""), ev.get("ts"), ev.get("dur")
        if not isinstance(name, str) or not isinstance(cat, str):
            raise SpecError.one(where, f"traceEvents[{i}].name", "must be a string")
        for key, v in (("ts", ts), ("dur", dur)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise SpecError.one(where, f"traceEvents[{i}].{key}", "must be a finite number ≥ 0 (µs)")
        if cat.lower() in _GPU_CATS:
            raise SpecError.one(where, f"traceEvents[{i}].cat", f"GPU event {cat!r}: only CPU traces are read "
                                "(device kernel time needs kernel-to-op correlation, not done here)")
        out.append((name, float(ts), float(dur), (repr(ev.get("pid")), repr(ev.get("tid"))), cat,
                    _sequence_number(ev)))
    return out


@dataclass
class _Unit:
    group: str | None
    start: float
    dur: float
    root: str
    rank: int = -1
    names: list = field(default_factory=list)
    seq: int | None = None
    """A backward node's sequence number: the forward op autograd made it from."""
    parent: _Unit | None = None
    """A backward node's forward unit (by sequence number), when it is in the trace."""


def _classify(unit: _Unit, name: str) -> None:
    """Fold the ATen op ``name`` (inside ``unit``) into the unit's class by CLASS_RANK."""
    from simtrain.graph.aten import CLASS_RANK
    if unit.group == OPTIMIZER or not name.startswith("aten::"):
        return
    cls = op_class_of(name)
    if cls is not None and CLASS_RANK[cls] > unit.rank:
        unit.group, unit.rank = cls.value, CLASS_RANK[cls]


def _thread_units(events, forward: dict[int, _Unit]) -> tuple[list[_Unit], list[tuple[float, float]], list[float]]:
    """Units of one thread, its ProfilerStep spans and Optimizer.step end times (events sorted by start);
    ``forward`` gathers sequence number → the last forward unit whose ATen ops carry it."""
    units, steps, opt_ends = [], [], []
    stack: list[tuple[float, _Unit | None]] = []  # (end µs, the unit this frame opened or None)
    for name, ts, dur, _, _, seq in events:
        while stack and ts >= stack[-1][0] - _EPS_US:
            stack.pop()
        inside = next((u for _, u in reversed(stack) if u is not None), None)
        opened = None
        if name.startswith("ProfilerStep#"):
            steps.append((ts, ts + dur))
        elif inside is not None:
            _classify(inside, name)
            if seq is not None and inside.group != OPTIMIZER and not inside.root.startswith(_AUTOGRAD_NODE) \
                    and name.startswith("aten::"):
                forward[seq] = inside
        elif name.startswith(_OPT_PREFIXES):
            opened = _Unit(OPTIMIZER, ts, dur, name)
            if name.startswith("Optimizer.step#"):
                opt_ends.append(ts + dur)
        elif name.startswith("aten::") or name.startswith(_AUTOGRAD_NODE):
            backward = name.startswith(_AUTOGRAD_NODE)
            opened = _Unit(None, ts, dur, name, seq=seq if backward else None)
            _classify(opened, name)
            units.append(opened)
            if seq is not None and not backward:
                forward[seq] = opened  # the last op to carry a number made the node: ops that make none
                # (views, no-grad ops) record the number the next node will get
        if opened is not None and opened.group == OPTIMIZER:
            units.append(opened)
        stack.append((ts + dur, opened))
    return units, steps, opt_ends


def _follow_forward(units: list[_Unit], forward: dict[int, _Unit]) -> None:
    """A backward node takes the class of the forward unit it was made from, as the importer prices a
    torch call's backward with the call (``LogSoftmaxBackward0`` of ``aten::cross_entropy_loss`` is
    the reduction's, ``TBackward0`` of ``aten::linear`` the matmul's); a node whose forward op is not
    in the trace, or whose forward unit has no class, keeps its own."""
    for u in units:
        fwd = forward.get(u.seq) if u.seq is not None else None
        if fwd is not None and fwd.group is not None and fwd.group != OPTIMIZER:
            u.group, u.parent = fwd.group, fwd


def _calls(units: list[_Unit], spans: list[tuple[float, float]]) -> tuple[CallTime, ...]:
    """Per step, its forward calls in order with the backward time of each (:class:`CallTime`); the
    median per position over the steps whose sequence of forward calls is the most common one (a step
    the profiler cut short, or a data-dependent graph, is left out)."""
    if not spans:
        return ()
    steps: list[list[_Unit]] = [[] for _ in spans]
    for u in units:
        if u.parent is None and u.group != OPTIMIZER and not u.root.startswith(_AUTOGRAD_NODE):
            k = _step_of(spans, u.start)
            if k is not None:
                steps[k].append(u)
    back: dict[int, list[_Unit]] = defaultdict(list)
    for u in units:
        if u.parent is not None:
            back[id(u.parent)].append(u)
    names = [tuple(u.root for u in s) for s in steps]
    ref = max(set(names), key=names.count)
    same = [s for s, n in zip(steps, names, strict=True) if n == ref]
    out = []
    for i, first in enumerate(same[0]):
        bws = [sum(b.dur for b in back[id(s[i])]) for s in same]
        out.append(CallTime(root=first.root, group=first.group or UNMAPPED,
                            fw_s=statistics.median(s[i].dur for s in same) * 1e-6,
                            bw_s=statistics.median(bws) * 1e-6, bw_units=float(len(back[id(first)]))))
    return tuple(out)


def _step_of(spans: list[tuple[float, float]], ts: float) -> int | None:
    import bisect
    i = bisect.bisect_right([s for s, _ in spans], ts) - 1
    return i if i >= 0 and ts <= spans[i][1] + _EPS_US else None


def _optimizer_spans(units: list[_Unit], ends: list[float]) -> list[tuple[float, float]]:
    """Without ProfilerStep markers, a step ends where its Optimizer.step ends (the first starts
    with the first unit); units after the last optimizer step belong to no step."""
    if not ends:
        return []
    first = min(u.start for u in units)
    return list(zip([first] + ends[:-1], ends, strict=True))


def _step_count(where: str, marked: int, opt_steps: int, steps: int | None) -> int:
    found = marked or opt_steps
    if steps is not None:
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise SpecError.one(where, "steps", "must be an integer ≥ 1")
        if found and found != steps:
            what = "ProfilerStep" if marked else "Optimizer.step"
            raise SpecError.one(where, "steps", f"the trace holds {found} {what} markers, not {steps}")
        return steps
    if not found:
        raise SpecError.one(where, "steps", "the trace has no ProfilerStep# or Optimizer.step# markers: "
                            "say how many training steps it holds (steps=N, --steps N)")
    return found


def trace_times(doc, where: str = "trace", steps: int | None = None) -> TraceTimes:
    """:class:`TraceTimes` of a parsed trace document (see the module docstring)."""
    by_thread: dict = defaultdict(list)
    for ev in _events(doc, where):
        by_thread[ev[3]].append(ev)
    units, spans, opt_ends = [], [], []
    forward: dict[int, _Unit] = {}
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e[1], -e[2]))
        u, s, o = _thread_units(evs, forward)
        units, spans, opt_ends = units + u, spans + s, opt_ends + o
    _follow_forward(units, forward)
    if not units:
        raise SpecError.one(where, "traceEvents", "no ATen ops in the trace (profile with ProfilerActivity.CPU)")
    n = _step_count(where, len(spans), len(opt_ends), steps)
    spans = sorted(spans) or _optimizer_spans(units, sorted(opt_ends))
    total: dict[str, float] = defaultdict(float)
    count: dict[str, float] = defaultdict(float)
    per_step = [defaultdict(float) for _ in spans]
    unmapped = set()
    for u in units:
        group = u.group or UNMAPPED
        if u.group is None:
            unmapped.add(u.root)
        if spans:
            k = _step_of(spans, u.start)
            if k is None:
                continue  # outside every marked step (set-up before the first prof.step())
            per_step[k][group] += u.dur * 1e-6
        total[group] += u.dur * 1e-6
        count[group] += 1
    steps_s = [(e - s) * 1e-6 for s, e in spans]
    calls = _calls(units, spans)
    if len(per_step) >= _ROBUST_STEPS:  # the median step: one step a busy machine interrupted moves nothing
        seconds = {g: statistics.median(p.get(g, 0.0) for p in per_step) for g in sorted(total)}
        step_s = statistics.median(steps_s)
    else:
        seconds = {g: v / n for g, v in sorted(total.items())}
        step_s = sum(steps_s) / len(steps_s) if steps_s else None
    return TraceTimes(seconds=seconds, steps=n, step_s=step_s, units={g: v / n for g, v in sorted(count.items())},
                      per_step=tuple(dict(s) for s in per_step), unmapped_names=tuple(sorted(unmapped)[:50]),
                      source=where, calls=calls)


def read_profiler_trace(path: str | os.PathLike, steps: int | None = None,
                        max_bytes: int = MAX_TRACE_BYTES) -> TraceTimes:
    """Read a ``torch.profiler`` Chrome trace into measured seconds per op class and step."""
    path = Path(path)
    return trace_times(load_trace_document(path, max_bytes), str(path), steps)
