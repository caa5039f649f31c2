"""What one task of the pipeline does, segment by segment, read off the per-rank program.

A task is one model chunk's forward (or backward + recomputation) of one micro-batch on one pipeline
rank. The program (parallel/program.py ``StageProgram``) gives, per micro-batch and stage, the
compute seconds by phase and every collective as a ``CommTask`` whose seconds the estimate splits
into an *exposed* part max(0, total − overlap) and a *hidden* part min(total, overlap) that still
costs ``slowdown`` × itself in interference (comm_tasks.py). The simulator keeps that split:

* blocking segments, run one after the other on the rank: compute (+ interference), then the
  exposed part of each collective on its axis's stream (tp, cp, ep, dp, stream), then the pipeline
  send to the next rank (the tail of the task, blocking as Megatron-LM's p2p exchange);
* hidden segments, started with the task on their axis's overlapped stream; the task ends no
  earlier than they do (the compute they hide behind cannot finish before its collective).

Every per-micro-batch quantity of a stage covers its v chunks, so a task takes 1/v of it. With
``granularity="layer"`` the blocking part is cut into the chunk's layers, each its share of the
compute followed by its share of the exposed collectives (the program keeps per-phase totals, not
per-block ones, so the cut is even); when nothing contends the cut changes no time. With
``granularity="op"`` each chunk's task has its own recipe: one compute slice per op of the chunk
(forward in execution order, backward with its recomputation in reverse), each its cost-layer
seconds scaled so the task keeps the program's total (host-bound waits and interference spread in
proportion), then the exposed collectives on their streams.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from simtrain.parallel.schedule_orders import chunk_marks

__all__ = ["Segment", "TaskRecipe", "StepSync", "stage_recipes", "step_sync", "sync_extras", "COMM_AXES"]

COMM_AXES = ("tp", "cp", "ep", "dp", "stream")
"""Axes whose collectives sit inside a task (pp is the send at its tail)."""


@dataclass(frozen=True, slots=True)
class Segment:
    lane: str
    """The stream it runs on: "compute", an axis ("tp", …), "<axis> overlapped", "pp fw send" …"""
    name: str
    seconds: float
    """Uncontended seconds (the cost layer's); a shared link stretches a comm segment."""
    axis: str | None = None
    """The parallel axis of a communication segment (which link it uses); None for compute."""
    bytes: float = 0.0


@dataclass(frozen=True, slots=True)
class TaskRecipe:
    blocking: tuple[Segment, ...]
    hidden: tuple[Segment, ...]
    send: Segment | None
    """The pipeline send at the tail (its time is in the task even where no rank receives it)."""


@dataclass(frozen=True, slots=True)
class StepSync:
    """Per-step data-parallel work of a stage: ``before`` (exposed, before the first forward) and
    ``before_hidden`` (behind the first forward task); ``after_hidden`` (behind the last backward
    task, in buckets) and ``after`` (exposed, after the last backward)."""

    before: tuple[Segment, ...]
    before_hidden: tuple[Segment, ...]
    after_hidden: tuple[Segment, ...]
    after: tuple[Segment, ...]


def _split(task, v: int) -> tuple[float, float, float]:
    """(exposed, hidden, interference) seconds of a CommTask's share in one of v chunk tasks."""
    hidden = min(task.total_s, task.overlap_s)
    exposed = max(0.0, task.total_s - task.overlap_s)
    return exposed / v, hidden / v, task.slowdown * hidden / v


def _phase_comm(stage, phases: tuple[str, ...], v: int):
    """Per axis (exposed s, bytes), hidden segments, total interference s of one task's collectives."""
    exposed: dict[str, list[float]] = {}
    hidden: dict[str, list[float]] = {}
    interference, send = 0.0, None
    for t in stage.comm:
        if t.phase not in phases:
            continue
        e, h, i = _split(t, v)
        if t.axis == "pp":  # the send at the task's tail blocks for what the estimate charges of it
            send = (e + i, t.bytes)
            if h > 0:  # a send the stack posts before the next chunk's compute (Stack.pp_comm_overlap)
                hidden.setdefault("pp", [0.0, 0.0])[0] += h
                hidden["pp"][1] += t.bytes * t.count / v
            continue
        acc = exposed.setdefault(t.axis, [0.0, 0.0])
        acc[0] += e
        acc[1] += t.bytes * t.count / v
        interference += i
        if h > 0:  # one overlapped segment per axis: its collectives run one after another on its stream
            acc = hidden.setdefault(t.axis, [0.0, 0.0])
            acc[0] += h
            acc[1] += t.bytes * t.count / v
    segs = tuple(Segment(f"{a} overlapped", f"{a} collective (overlapped)", h, a, b) for a, (h, b) in hidden.items())
    return exposed, segs, interference, send


def _blocking(compute: list[tuple[str, float]], exposed: dict, layers: int) -> tuple[Segment, ...]:
    """Compute pieces then the exposed collectives, ``layers`` times over (each a 1/layers share)."""
    out = []
    for i in range(layers):
        tag = f" l{i}" if layers > 1 else ""
        for name, seconds in compute:
            if seconds > 0:
                out.append(Segment("compute", name + tag, seconds / layers))
        for axis in COMM_AXES:
            if axis in exposed and exposed[axis][0] > 0:
                sec, nbytes = exposed[axis]
                out.append(Segment(axis, f"{axis} collective{tag}", sec / layers, axis, nbytes / layers))
    return tuple(out)


def _op_slices(ops, phase: int, total_s: float) -> list[tuple[str, float]]:
    """One compute piece per op of a chunk: its seconds of ``phase`` (1 forward, 2 backward +
    recomputation, in reverse order), scaled to sum to ``total_s``."""
    seq = [(op[0], op[phase]) for op in ops]
    seq = seq if phase == 1 else seq[::-1]
    raw = sum(s for _, s in seq)
    scale = total_s / raw if raw > 0 else 0.0
    return [("{task} " + name, s * scale) for name, s in seq]


def stage_recipes(stage, v: int, granularity: str = "chunk", chunk_ops: dict | None = None,
                  split: bool = False) -> dict:
    """{"F": forward task, "B": backward task} of one chunk of ``stage`` (names filled per task).
    A backward's recomputation is its own slice per layer with ``granularity="layer"``; per chunk it
    is part of the task's one compute slice (one slice per task, as trace consumers expect). With
    ``granularity="op"`` also {("F", c), ("B", c)} per global chunk c of ``chunk_ops`` (its ops as
    (name, forward s, backward + recomputation s)): one slice per op. ``split`` (a schedule that
    splits the backward) adds the I, W, Fo and Bo tasks (:func:`split_recipes`)."""
    layers = max(1, math.ceil(len(stage.blocks) / v)) if granularity == "layer" else 1
    out: dict = {}
    for kind, phases in (("F", ("fw",)), ("B", ("bw", "recompute"))):
        exposed, hidden, interference, send = _phase_comm(stage, phases, v)
        if kind == "F":
            compute = [("{task}", stage.fw_s / v + interference)]
        elif layers > 1:
            compute = [("{task} recompute", stage.recompute_s / v), ("{task}", stage.bw_s / v + interference)]
        else:
            compute = [("{task}", (stage.recompute_s + stage.bw_s) / v + interference)]
        seg = None
        if send is not None:
            lane = "pp fw send" if kind == "F" else "pp bw send"
            seg = Segment(lane, "send {dir} c{chunk}", send[0], "pp", send[1])
        out[kind] = TaskRecipe(_blocking(compute, exposed, layers), hidden, seg)
        if granularity == "op":
            total = sum(s for _, s in compute)
            for c, ops in (chunk_ops or {}).items():
                out[(kind, c)] = TaskRecipe(_blocking(_op_slices(ops, 1 if kind == "F" else 2, total), exposed, 1),
                                            hidden, seg)
    if split:
        out.update(split_recipes(stage, v, out["F"], out["B"]))
    return out


def _as_hidden(rec: TaskRecipe) -> tuple[Segment, ...]:
    """A task's collectives and send moved beside its compute (an overlapped pair hides them)."""
    comm = [replace(seg, lane=f"{seg.lane} (paired)", name=f"{seg.name} (paired)")
            for seg in rec.blocking if seg.axis is not None]
    if rec.send is not None:
        comm.append(Segment(f"{rec.send.lane} (paired)", "pp send (paired)", rec.send.seconds, "pp", rec.send.bytes))
    return rec.hidden + tuple(comm)


def split_recipes(stage, v: int, forward: TaskRecipe, backward: TaskRecipe) -> dict:
    """The split schedules' tasks (parallel/schedule.py ``TASK_KINDS``), each as long as
    ``StageProgram.task_seconds`` says: I, the backward less its weight-gradient compute; W, that
    compute; Fo / Bo, an overlapped forward / backward pair: each its compute, the collectives and
    sends of both beside it, and what of them the two computes cannot cover at the pair's end."""
    t = stage.task_seconds(v)
    w = t["W"]
    # the backward's compute slices (not its recomputation) lose the weight-gradient share, evenly
    def is_grad(seg: Segment) -> bool:
        return seg.axis is None and "recompute" not in seg.name
    total = sum(seg.seconds for seg in backward.blocking if is_grad(seg))
    keep = (total - w) / total if total > 0 else 0.0
    i_blocking = tuple(replace(seg, seconds=seg.seconds * keep) if is_grad(seg) else seg for seg in backward.blocking)
    b_compute_s = stage.compute_side_s(("bw", "recompute")) / v
    excess = t["Bo"] - b_compute_s
    paired = (Segment("compute", "{task}", t["Fo"]),)
    b_paired = (Segment("compute", "{task}", b_compute_s),) + (
        (Segment("compute", "{task} (pair's communication)", excess),) if excess > 0 else ())
    return {"I": TaskRecipe(i_blocking, backward.hidden, backward.send),
            "W": TaskRecipe((Segment("compute", "{task}", w),), (), None),
            "Fo": TaskRecipe(paired, _as_hidden(forward), None),
            "Bo": TaskRecipe(b_paired, _as_hidden(backward), None)}


def _buckets(total_bytes: float, bucket_bytes: float) -> int:
    return max(1, math.ceil(total_bytes / bucket_bytes))


def step_sync(stage, bucket_bytes: float, max_buckets: int = 64) -> StepSync:
    """The stage's per-step data-parallel sync split as the estimate splits it (comm_tasks.step_comm):
    the hidden part of the gradient reduction runs in buckets behind the last backward task (all
    but the last bucket; at most ``max_buckets`` events, larger counts merged evenly)."""
    before, before_h, after_h, after = [], [], [], []
    for t in stage.step_comm:
        e, h, i = _split(t, 1)
        label = f"dp {t.kind}"
        if t.phase == "step-start":
            if e + i > 0:
                before.append(Segment("dp sync", f"{label} (exposed)", e + i, "dp", t.bytes))
            if h > 0:
                before_h.append(Segment("dp sync", f"{label} (overlapped)", h, "dp", t.bytes))
            continue
        if h > 0:
            n = min(max(1, _buckets(t.bytes, bucket_bytes) - 1), max_buckets)
            after_h += [Segment("dp sync", f"{label} bucket {k}", h / n, "dp", t.bytes / (n + 1)) for k in range(n)]
        if e + i > 0:
            after.append(Segment("dp sync", f"{label} (exposed)", e + i, "dp", t.bytes))
    return StepSync(tuple(before), tuple(before_h), tuple(after_h), tuple(after))


def _share(segs: tuple[Segment, ...], n: int) -> tuple[Segment, ...]:
    return segs if n == 1 else tuple(replace(s, seconds=s.seconds / n, bytes=s.bytes / n) for s in segs)


def sync_extras(sync: StepSync, order) -> dict[int, tuple[Segment, ...]]:
    """Which task of a rank's static order (``rank_order``: (kind, chunk, micro-batch) tuples) runs
    which hidden part of the step's data-parallel sync beside it, by index. One chunk per rank: the
    parameter gather behind the first task, the gradient buckets behind the last. Several chunks
    (parallel/chunk_sync.py): an equal share of the gradient buckets behind each chunk's last
    backward, and chunk j's share of the gather from the first task (j ≤ 1) or from chunk j − 1's
    first forward — where the estimate's per-chunk rule lets them run (the seconds are the estimate's;
    a share longer than its task is fitted into it, as every hidden segment is)."""
    last, first = chunk_marks(order)
    grad_at = sorted(last.values()) if len(last) > 1 else [len(order) - 1]
    starts = sorted(first.values()) if len(first) > 1 else [0]
    gather_at = [0 if j <= 1 else starts[j - 1] for j in range(len(starts))]
    out: dict[int, tuple[Segment, ...]] = {}
    for where, segs in ((gather_at, sync.before_hidden), (grad_at, sync.after_hidden)):
        part = _share(segs, len(where))
        for i in where:
            if part:
                out[i] = out.get(i, ()) + part
    return out
