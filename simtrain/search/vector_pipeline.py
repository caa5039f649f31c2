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

from simtrain.glossary import PipelineSchedule
from simtrain.parallel.schedule import TASK_KINDS, walk_tasks

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
    """Duration row: kind index × p + r (``schedule.TASK_KINDS``: r for a forward on rank r, p + r
    for a full backward, …)."""
    last_of_rank: np.ndarray
    """Row holding each rank's last end time (its last backward)."""


@functools.lru_cache(maxsize=64)
def task_graph(p: int, m: int, schedule: PipelineSchedule, v: int) -> TaskGraph:
    """The wavefront-numbered task graph of one pipeline structure (cached)."""
    walk = walk_tasks(p, m, PipelineSchedule(schedule), v)
    cols, prevs, deps, lv, free = walk.cols, walk.prevs, walk.deps, walk.levels, walk.last
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
                         start_s: np.ndarray, other: dict | None = None) -> np.ndarray:
    """When each rank ends its last task, for N configurations of one structure: ``fw_s``,
    ``bw_s``, ``start_s`` are (N, p) arrays (one chunk's forward / full backward task on rank r, the
    rank's start); ``other``: {kind: (N, p)} of a split schedule's other task kinds. Returns (N, p).
    Same values as ``pipeline_finish_s`` row by row."""
    n, p = fw_s.shape
    if p == 1:  # no pipeline: the micro-batches back to back (schedule._finish)
        return start_s + m * v * (fw_s + bw_s)
    graph = task_graph(p, m, PipelineSchedule(schedule), v)
    out = np.empty((n, p))
    step = max(1, _MAX_CELLS // (graph.tasks + p + 1))
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        rest = [(other or {}).get(k, np.zeros_like(fw_s))[lo:hi] for k in TASK_KINDS[2:]]
        out[lo:hi] = _evaluate(graph, [fw_s[lo:hi], bw_s[lo:hi], *rest], start_s[lo:hi])
    return out


def _evaluate(graph: TaskGraph, durations: list, start_s) -> np.ndarray:
    p, t = graph.p, graph.tasks
    end = np.empty((t + p + 1, start_s.shape[0]))  # rows: tasks, starts, zero — one column per configuration
    end[t:t + p] = start_s.T
    end[t + p] = 0.0
    dur = np.concatenate([d.T for d in durations])  # rows kind · p + r (schedule.TASK_KINDS)
    prev, dep, col, b = graph.prev, graph.dep, graph.col, graph.bounds
    for lo, hi in zip(b[:-1], b[1:], strict=True):
        end[lo:hi] = np.maximum(end[prev[lo:hi]], end[dep[lo:hi]]) + dur[col[lo:hi]]
    return end[graph.last_of_rank].T
