"""Pipeline schedules as data and in closed form (Narayanan et al. 2021, "Efficient Large-Scale
Language Model Training on GPU Clusters Using Megatron-LM", §2.2; Huang et al. 2019 GPipe).

With p stages, m micro-batches per step, v model chunks per stage and per-micro-batch stage times
t_f (forward) and t_b (backward):

* GPipe and 1F1B: step = (m + p − 1)·(t_f + t_b); bubble fraction (p − 1)/(m + p − 1) of the step
  (= (p − 1)/m of the ideal time). With unequal stages the slowest stage paces the steady state:
  step ≈ Σ_s (t_f,s + t_b,s) + (m − 1)·max_s (t_f,s + t_b,s).
* interleaved 1F1B: each stage runs v chunks of 1/v the work, the bubble shrinks v-fold:
  step = m·t + (p − 1)·t / v with t = t_f + t_b of one stage (all its chunks), when m ≥ p; with
  fewer micro-batches than stages it cannot fill: step = p·t + (m − 1)·t / v.
* micro-batches whose activations a stage holds at once: GPipe m; 1F1B min(p − s, m) on stage s;
  interleaved p·(1 + (p − 1)/(p·v)) on the first stage (Korthikanti et al. 2022 §4.2.3), capped by m·v/v.

Those closed forms (:func:`pipeline_time_s`) are the textbook figures for equal stages. Both engines
time the pipeline from one definition instead: every rank runs its tasks in the framework's static
order (:func:`rank_order`: GPipe all forwards then all backwards; Megatron-LM's 1F1B; Megatron-core's
interleaved 1F1B schedule table, which also covers m < p), a task starting when its rank is free and
its input is there. :func:`pipeline_finish_s` evaluates that schedule exactly (a max-plus recurrence,
so every finish time is monotone in every task time); ``st.simulate`` executes the same orders as
simpy processes. With equal stages the recurrence gives the closed forms above.

Two schedules split the backward into its input-gradient half ("I", on the critical path: the
previous stage waits for it) and its weight-gradient half ("W", which nothing downstream waits for,
so it can fill what would be bubble):

* ZB-H1 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", ICLR, §3.1; PyTorch
  ``ScheduleInterleavedZeroBubble`` with one stage per rank): 1F1B's warm-up, then F, I and — from
  the (rank + 1)-th steady iteration on — the oldest pending W; the rest of the W's after the last
  I. Rank r defers r weight passes, which is what lets the bubble shrink to (p − 1)(t_F + t_I − t_W)
  while the peak memory stays 1F1B's (p micro-batches on the first stage).
* DualPipeV (DeepSeek-AI 2024, "DeepSeek-V3 Technical Report" §3.2.1 and Table 2; the V-shaped
  variant of the DualPipe repository, PyTorch ``ScheduleDualPipeV``): two chunks per rank placed as a
  V (rank r holds chunk r and chunk 2p − 1 − r, so the first and the last chunk share rank 0); a
  forward of one chunk and a full backward of the other run as an overlapped pair ("Fo" then "Bo")
  whose collectives hide behind each other's compute: the pair takes max(compute of both, exposed
  communication of both). Bubble (p − 1)(t_F&B + t_B − 3 t_W) for 2p chunks in DeepSeek's notation; it
  needs at least 2p micro-batches.

Activations are held from a chunk's forward to the end of its backward (its W when split): a split
schedule's in-flight count is read off its static order (:func:`in_flight_microbatches`).

The static orders themselves are in :mod:`simtrain.parallel.schedule_orders` (re-exported here).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from simtrain.glossary import PipelineSchedule
from simtrain.parallel.schedule_orders import (  # noqa: F401  (re-exported: the orders are part of the schedule)
    FORWARD_KINDS,
    SPLIT_BACKWARD,
    TASK_KINDS,
    chunk_rank,
    frees_activations,
    interleave_group,
    is_backward,
    is_forward,
    order_peak_chunks,
    rank_order,
    schedule_order,
    stage_chunks,
)

__all__ = ["pipeline_time_s", "bubble_fraction", "in_flight_microbatches", "schedule_order", "rank_order",
           "pipeline_finish_s", "interleave_group", "SPLIT_BACKWARD", "TASK_KINDS", "chunk_rank", "stage_chunks",
           "task_walk", "walk_tasks", "TaskWalk", "order_peak_chunks", "is_forward", "is_backward", "frees_activations"]


def bubble_fraction(p: int, m: int, v: int = 1) -> float:
    """Fraction of the step the pipeline idles with equal stages: (p − 1)/v / (m + (p − 1)/v); with
    v > 1 and m < p, (p − m + (m − 1)/v) / (p + (m − 1)/v) (see :func:`pipeline_time_s`)."""
    if v > 1 and m < p:
        return (p - m + (m - 1) / v) / (p + (m - 1) / v)
    warm = (p - 1) / v
    return warm / (m + warm)


def pipeline_time_s(stage_times_s: list[float], m: int, schedule: PipelineSchedule, v: int = 1) -> float:
    """Step time of the pipeline given each stage's fw + bw seconds per micro-batch (all its chunks):
    the closed forms, exact for equal stages (:func:`pipeline_finish_s` is exact for any). Interleaved
    with fewer micro-batches than stages cannot fill the pipeline: each micro-batch still crosses all
    p·v chunks (p·t) and the others follow one chunk apart, p·t + (m − 1)·t/v."""
    p = len(stage_times_s)
    if p == 1:
        return m * stage_times_s[0]
    slowest = max(stage_times_s)
    if schedule is PipelineSchedule.INTERLEAVED:
        t = sum(stage_times_s) / p
        if m < p:
            return p * slowest + (m - 1) * t / v
        return m * slowest + (p - 1) * t / v
    return sum(stage_times_s) + (m - 1) * slowest


def in_flight_microbatches(stage: int, p: int, m: int, schedule: PipelineSchedule, v: int = 1) -> float:
    """Micro-batches' worth of (whole-stage) activations stage ``stage`` holds at its peak; a split
    schedule's read off its order (:func:`order_peak_chunks` / v)."""
    schedule = PipelineSchedule(schedule)
    if schedule in SPLIT_BACKWARD and p > 1:
        return order_peak_chunks(stage, p, m, schedule, v) / v
    if schedule is PipelineSchedule.GPIPE or p == 1:
        return float(m if p > 1 else 1)
    if schedule is PipelineSchedule.INTERLEAVED:
        peak = (p - stage) + (p - 1 - stage) / v if stage else p * (1 + (p - 1) / (p * v))
        return float(min(peak, m))
    return float(min(p - stage, m))


@dataclass(frozen=True)
class TaskWalk:
    """Every task of one pipeline structure in an order where each follows its predecessors (the
    traversal both engines' evaluations share). Rows of an end-time table: tasks 0..n-1, then each
    rank's start time (n + r), then a constant 0 (the first chunk's forward has no input to wait for)."""

    p: int
    cols: tuple[int, ...]
    """Duration row of each task: kind index × p + rank (kinds in :data:`TASK_KINDS` order)."""
    prevs: tuple[int, ...]
    """Row of the task before it on its rank (or the rank's start)."""
    deps: tuple[int, ...]
    """Row of the task whose output it needs (or the zero row)."""
    levels: tuple[int, ...]
    """Wavefront of each task: one more than the larger of its two predecessors' (starts: 0)."""
    last: tuple[int, ...]
    """Row of each rank's last task."""


@functools.lru_cache(maxsize=8)
def task_walk(p: int, m: int, schedule: PipelineSchedule, v: int) -> TaskWalk:
    """The tasks of every rank's static order (:func:`rank_order`) visited rank by rank as far as
    their inputs allow, round after round; a round that moves nothing is a deadlock. Memoised for a
    few structures only: a walk holds Python tuples of 2·m·p·v tasks (the vectorized evaluator keeps
    its own compact graphs, from :func:`walk_tasks`)."""
    return walk_tasks(p, m, schedule, v)


def walk_tasks(p: int, m: int, schedule: PipelineSchedule, v: int) -> TaskWalk:
    """:func:`task_walk` without the memo."""
    schedule = PipelineSchedule(schedule)
    chunks = p * v
    orders = [rank_order(r, p, m, schedule, v) for r in range(p)]
    total = sum(len(o) for o in orders)
    zero_row = total + p
    f_end: list[list] = [[None] * m for _ in range(chunks)]
    b_end: list[list] = [[None] * m for _ in range(chunks)]
    kind_row = {k: i * p for i, k in enumerate(TASK_KINDS)}
    ptr, free = [0] * p, [total + r for r in range(p)]
    cols, prevs, deps, lv = [], [], [], [0] * (total + p + 1)
    remaining, t = total, 0
    while remaining:
        moved = 0
        for r in range(p):
            order, i, n = orders[r], ptr[r], len(orders[r])
            while i < n:
                kind, c, mb = order[i]
                if kind in FORWARD_KINDS:
                    dep = zero_row if c == 0 else f_end[c - 1][mb]
                elif kind == "W":
                    dep = b_end[c][mb]
                else:
                    dep = f_end[c][mb] if c == chunks - 1 else b_end[c + 1][mb]
                if dep is None:
                    break
                if kind in FORWARD_KINDS:
                    f_end[c][mb] = t
                elif kind != "W":
                    b_end[c][mb] = t
                prev = free[r]
                cols.append(kind_row[kind] + r)
                prevs.append(prev)
                deps.append(dep)
                lv[t] = 1 + (lv[prev] if lv[prev] > lv[dep] else lv[dep])
                free[r] = t
                t += 1
                i += 1
            moved += i - ptr[r]
            ptr[r] = i
        if not moved:
            from simtrain.errors import SimtrainError
            raise SimtrainError(f"pipeline schedule {schedule.value} deadlocks (p={p}, m={m}, v={v})")
        remaining -= moved
    return TaskWalk(p, tuple(cols), tuple(prevs), tuple(deps), tuple(lv[:total]), tuple(free))




def pipeline_finish_s(fw_s, bw_s, m: int, schedule: PipelineSchedule, v: int = 1, start_s=None,
                      other=None) -> tuple[float, ...]:
    """When each rank ends its last task: ``fw_s[r]`` / ``bw_s[r]`` are the seconds of one chunk's
    forward / (full) backward task on rank r (sends to the next rank included), ``start_s[r]`` when
    rank r may start (default 0); ``other``: {kind: per-rank seconds} of the other task kinds a split
    schedule runs (I, W, Fo, Bo; see :data:`TASK_KINDS`). Exact for the static orders of
    :func:`rank_order` (memoised)."""
    p = len(fw_s)
    start = tuple(float(x) for x in start_s) if start_s is not None else (0.0,) * p
    rest = tuple(tuple(map(float, (other or {}).get(k, (0.0,) * p))) for k in TASK_KINDS[2:])
    return _finish(tuple(map(float, fw_s)), tuple(map(float, bw_s)), rest, m, PipelineSchedule(schedule), v, start)


@functools.lru_cache(maxsize=4096)
def _finish(fw: tuple, bw: tuple, rest: tuple, m: int, schedule: PipelineSchedule, v: int,
            start: tuple) -> tuple[float, ...]:
    p = len(fw)
    if p == 1:  # no pipeline: the micro-batches back to back
        return (start[0] + m * v * (fw[0] + bw[0]),)
    walk = task_walk(p, m, schedule, v)
    dur = fw + bw + sum(rest, ())
    n = len(walk.cols)
    end = [0.0] * (n + p + 1)
    end[n:n + p] = start
    for t, (col, prev, dep) in enumerate(zip(walk.cols, walk.prevs, walk.deps, strict=True)):
        a, b = end[prev], end[dep]
        end[t] = (a if a >= b else b) + dur[col]
    return tuple(end[row] for row in walk.last)
