"""The pipeline schedule evaluated for many configurations at once (numpy), exactly as the scalar
:func:`simtrain.parallel.schedule.pipeline_finish_s` does for one.

The schedule's task graph depends only on (p, m, schedule, v): every rank runs its tasks in the
static order of :func:`~simtrain.parallel.schedule.rank_order`, a task starting when its rank is free
and its input is there (a max-plus recurrence). The graph is built once per structure; its tasks are
sorted into wavefronts (a task's level is one more than the levels of its two predecessors), and each
wavefront is one numpy expression over every configuration:
``end[task] = max(end[previous task on the rank], end[input task]) + duration[rank, kind]`` — the same
operations, in the same order per task, as the scalar recurrence, so the results are bit-identical.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from simtrain.errors import SimtrainError
from simtrain.glossary import PipelineSchedule
from simtrain.parallel.schedule import rank_order

__all__ = ["pipeline_finish_many", "TaskGraph", "task_graph"]

_MAX_CELLS = 12_000_000
"""Task × configuration cells evaluated at once (96 MB of float64): bounds memory on long pipelines."""


@dataclass(frozen=True)
class TaskGraph:
    """Tasks of one pipeline structure, numbered by wavefront (tasks of level ℓ are rows
    ``bounds[ℓ]:bounds[ℓ + 1]``). Rows of the end-time table: tasks 0..n-1, then each rank's start
    time (n + r), then a constant 0 (the first chunk's forward has no input to wait for)."""

    p: int
    tasks: int
    bounds: tuple[int, ...]
    prev: np.ndarray
    """Row of the task before it on its rank (or the rank's start)."""
    dep: np.ndarray
    """Row of the task whose output it needs (or the zero row)."""
    col: np.ndarray
    """Duration row: r for a forward on rank r, p + r for a backward."""
    last_of_rank: np.ndarray
    """Row holding each rank's last end time (its last backward)."""


def _walk(p: int, m: int, schedule: PipelineSchedule, v: int):
    """(duration row, previous row, input row, level) per task, in an order where every task follows
    its predecessors — the traversal of ``schedule._finish``, with task ids for times."""
    chunks = p * v
    orders = [rank_order(r, p, m, schedule, v) for r in range(p)]
    total = sum(len(o) for o in orders)
    zero_row = total + p
    f_end = [[None] * m for _ in range(chunks)]
    b_end = [[None] * m for _ in range(chunks)]
    ptr, free = [0] * p, [total + r for r in range(p)]
    cols, prevs, deps, lv = [], [], [], [0] * (total + p + 1)
    remaining, t = total, 0
    while remaining:
        moved = 0
        for r in range(p):
            order, i, n = orders[r], ptr[r], len(orders[r])
            while i < n:
                kind, c, mb = order[i]
                if kind == "F":
                    dep = zero_row if c == 0 else f_end[c - 1][mb]
                    if dep is None:
                        break
                    f_end[c][mb] = t
                    cols.append(r)
                else:
                    dep = f_end[c][mb] if c == chunks - 1 else b_end[c + 1][mb]
                    if dep is None:
                        break
                    b_end[c][mb] = t
                    cols.append(p + r)
                prev = free[r]
                prevs.append(prev)
                deps.append(dep)
                lv[t] = 1 + (lv[prev] if lv[prev] > lv[dep] else lv[dep])
                free[r] = t
                t += 1
                i += 1
            moved += i - ptr[r]
            ptr[r] = i
        if not moved:
            raise SimtrainError(f"pipeline schedule {schedule.value} deadlocks (p={p}, m={m}, v={v})")
        remaining -= moved
    return cols, prevs, deps, lv[:total], free


@functools.lru_cache(maxsize=64)
def task_graph(p: int, m: int, schedule: PipelineSchedule, v: int) -> TaskGraph:
    """The wavefront-numbered task graph of one pipeline structure (cached)."""
    cols, prevs, deps, lv, free = _walk(p, m, PipelineSchedule(schedule), v)
    n = len(cols)
    level = np.array(lv, dtype=np.int64)
    order = np.argsort(level, kind="stable")  # new row of task order[j] is j
    new = np.arange(n + p + 1, dtype=np.int64)  # starts and the zero row keep theirs
    new[order] = np.arange(n)
    bounds = np.flatnonzero(np.diff(level[order])) + 1
    return TaskGraph(p, n, (0, *bounds.tolist(), n), new[np.array(prevs, dtype=np.int64)[order]],
                     new[np.array(deps, dtype=np.int64)[order]], np.array(cols, dtype=np.int64)[order],
                     new[np.array(free, dtype=np.int64)])


def pipeline_finish_many(fw_s: np.ndarray, bw_s: np.ndarray, m: int, schedule, v: int,
                         start_s: np.ndarray) -> np.ndarray:
    """When each rank ends its last backward, for N configurations of one structure: ``fw_s``,
    ``bw_s``, ``start_s`` are (N, p) arrays (one chunk's forward / backward task on rank r, the rank's
    start); returns (N, p). Same values as ``pipeline_finish_s`` row by row."""
    n, p = fw_s.shape
    if p == 1:  # no pipeline: the micro-batches back to back (schedule._finish)
        return start_s + m * v * (fw_s + bw_s)
    graph = task_graph(p, m, PipelineSchedule(schedule), v)
    out = np.empty((n, p))
    step = max(1, _MAX_CELLS // (graph.tasks + p + 1))
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        out[lo:hi] = _evaluate(graph, fw_s[lo:hi], bw_s[lo:hi], start_s[lo:hi])
    return out


def _evaluate(graph: TaskGraph, fw_s, bw_s, start_s) -> np.ndarray:
    p, t = graph.p, graph.tasks
    end = np.empty((t + p + 1, fw_s.shape[0]))  # rows: tasks, starts, zero — one column per configuration
    end[t:t + p] = start_s.T
    end[t + p] = 0.0
    dur = np.concatenate([fw_s.T, bw_s.T])  # rows 0..p-1 forward of rank r, p..2p-1 backward
    prev, dep, col, b = graph.prev, graph.dep, graph.col, graph.bounds
    for lo, hi in zip(b[:-1], b[1:], strict=True):
        end[lo:hi] = np.maximum(end[prev[lo:hi]], end[dep[lo:hi]]) + dur[col[lo:hi]]
    return end[graph.last_of_rank].T
