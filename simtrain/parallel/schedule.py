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
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from simtrain.glossary import PipelineSchedule

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


SPLIT_BACKWARD = frozenset({PipelineSchedule.ZB_H1, PipelineSchedule.DUALPIPE_V})
"""Schedules that run a backward's input-gradient (I) and weight-gradient (W) halves as two tasks."""

TASK_KINDS = ("F", "B", "I", "W", "Fo", "Bo")
"""Task kinds: forward, full backward (I + W), input-gradient backward, weight-gradient backward, and
a forward / full backward run as an overlapped pair (DualPipe)."""

_FORWARD, _BACKWARD = frozenset({"F", "Fo"}), frozenset({"B", "I", "Bo"})
_FREES = frozenset({"B", "Bo", "W"})
"""Task kinds after which the chunk's activations are released."""


def is_forward(kind: str) -> bool:
    """A forward task (its end is what the next chunk's forward waits for)."""
    return kind in _FORWARD


def is_backward(kind: str) -> bool:
    """A backward task whose end the previous chunk's backward waits for (B, I, Bo: not W)."""
    return kind in _BACKWARD


def frees_activations(kind: str) -> bool:
    """The chunk's saved activations are released when a task of this kind ends."""
    return kind in _FREES


def chunk_rank(chunk: int, p: int, schedule: PipelineSchedule) -> int:
    """The pipeline rank that runs model chunk ``chunk``: round-robin (c mod p), or the V of
    DualPipeV (rank r holds chunks r and 2p − 1 − r)."""
    if schedule is PipelineSchedule.DUALPIPE_V and chunk >= p:
        return 2 * p - 1 - chunk
    return chunk % p


def stage_chunks(stage: int, p: int, v: int, schedule: PipelineSchedule) -> tuple[int, ...]:
    """The model chunks (of p·v, in model order) pipeline rank ``stage`` holds."""
    return tuple(c for c in range(p * v) if chunk_rank(c, p, PipelineSchedule(schedule)) == stage)


def schedule_order(stage: int, p: int, m: int, schedule: PipelineSchedule) -> list[tuple[str, int]]:
    """The order in which ``stage`` runs forward ('F', mb) and backward ('B', mb) work (non-interleaved).

    1F1B: p − stage − 1 warm-up forwards, then alternate one forward / one backward, then drain.
    GPipe: all forwards, then all backwards. Both engines use this order (via :func:`rank_order`).
    """
    if schedule is PipelineSchedule.GPIPE or p == 1:
        return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
    warm = min(p - stage - 1, m)
    order = [("F", i) for i in range(warm)]
    f, b = warm, 0
    while b < m:
        if f < m:
            order.append(("F", f))
            f += 1
        order.append(("B", b))
        b += 1
    return order


def _zb_h1_order(rank: int, p: int, m: int) -> list[tuple[str, int, int]]:
    """ZB-H1 on rank ``rank``: 1F1B's min(p − rank − 1, m) warm-up forwards; then per steady
    iteration F, I; per I (steady or cool-down) the oldest pending W once rank iterations have gone
    by; the remaining W's at the end."""
    warm = min(p - rank - 1, m)
    order = [("F", rank, mb) for mb in range(warm)]
    pending: list[int] = []
    for k in range(m):  # k-th backward: steady while forwards remain, cool-down after
        if warm + k < m:
            order.append(("F", rank, warm + k))
        order.append(("I", rank, k))
        pending.append(k)
        if k >= rank:
            order.append(("W", rank, pending.pop(0)))
    return order + [("W", rank, mb) for mb in pending]


class _DualPipeV:
    """Builds one rank's DualPipeV order, phase by phase (DeepSeek's DualPipe repository, ``dualpipev``;
    PyTorch ``ScheduleDualPipeV``): per chunk, micro-batch counters for forwards and backwards, and a
    queue of the weight passes an input-gradient backward left pending."""

    def __init__(self, rank: int, p: int) -> None:
        self.first, self.second = rank, 2 * p - 1 - rank
        self.order: list[tuple[str, int, int]] = []
        self.fwd = {self.first: 0, self.second: 0}
        self.bwd = {self.first: 0, self.second: 0}
        self.pending: list[tuple[int, int]] = []

    def forward(self, chunk: int, kind: str = "F") -> None:
        self.order.append((kind, chunk, self.fwd[chunk]))
        self.fwd[chunk] += 1

    def backward(self, chunk: int, kind: str = "B") -> None:
        """``kind`` "B" / "Bo": the full backward; "I": its input half, the W left pending."""
        mb = self.bwd[chunk]
        self.order.append((kind, chunk, mb))
        self.bwd[chunk] += 1
        if kind == "I":
            self.pending.append((chunk, mb))

    def pair(self, forward_chunk: int, backward_chunk: int) -> None:
        self.forward(forward_chunk, "Fo")
        self.backward(backward_chunk, "Bo")

    def weight(self) -> None:
        if self.pending:
            chunk, mb = self.pending.pop(0)
            self.order.append(("W", chunk, mb))


def _dualpipev_order(rank: int, p: int, m: int) -> list[tuple[str, int, int]]:
    """DualPipeV on rank ``rank`` (m ≥ 2p micro-batches), in its eight phases: forwards of the first
    chunk; forwards of both; I-W-F on the second chunk; the main phase of overlapped F&B pairs across
    the two chunks (the last rank's first pair not overlapped); full backward of the second chunk
    beside pairs; backwards of both (the second half split into I and W); W-then-I on the first
    chunk; the pending W's."""
    if m < 2 * p:
        from simtrain.errors import SimtrainError
        raise SimtrainError(f"pipeline schedule dualpipev needs at least 2 × pp = {2 * p} micro-batches per step, "
                            f"got {m}: raise global_batch_size or lower micro_batch_size or dp")
    d = _DualPipeV(rank, p)
    a, b = d.first, d.second
    rest = p - rank - 1
    for _ in range(2 * rest):
        d.forward(a)
    for _ in range(rank + 1):
        d.forward(a)
        d.forward(b)
    for _ in range(rest):
        d.backward(b, "I")
        d.weight()
        d.forward(b)
    for i in range(m - 2 * p + rank + 1):
        if i == 0 and rank == p - 1:  # not overlapped: it would stretch the bubble on the turn
            d.forward(a)
            d.backward(b)
        else:
            d.pair(a, b)
        d.pair(b, a)
    for _ in range(rest):
        d.backward(b)
        d.pair(b, a)
    split = False
    for i in range(rank + 1):
        if i == (rank + 1) // 2 and rank % 2 == 1:
            split = True
        d.backward(b, "I" if split else "B")
        if i == (rank + 1) // 2 and rank % 2 == 0:
            split = True
        d.backward(a, "I" if split else "B")
    for _ in range(rest):
        d.weight()
        d.backward(a, "I" if split else "B")
    while d.pending:
        d.weight()
    return d.order


def interleave_group(p: int, m: int) -> int:
    """Micro-batches per group of the interleaved schedule table (Megatron-core
    ``microbatch_group_size_per_vp_stage``): p by default; Megatron-core accepts g in [p, m] whose
    last group is empty or holds at least p (a shorter one deadlocks the table), so when p leaves
    such a remainder the smallest valid g larger than p; with m < p (which Megatron-core refuses)
    one group of all m micro-batches: depth-first through the chunks."""
    for g in range(min(p, m), m + 1):
        if m % g == 0 or m % g >= p:
            return g
    return m


def _interleaved_order(rank: int, p: int, m: int, v: int) -> list[tuple[str, int, int]]:
    """Megatron-core ``forward_backward_pipelining_with_interleaving``: the schedule table walks
    micro-batches in groups of g (:func:`interleave_group`), each group through chunk 0, 1, …, v − 1
    (backward: v − 1, …, 0); (p − rank − 1)·2 + (v − 1)·g warm-up forwards (all of them when that
    is at least m·v), then one forward / one backward, then the remaining backwards."""
    g = interleave_group(p, m)
    table = []
    for lo in range(0, m, g):
        hi = m if lo + g >= m else lo + g
        table += [(mb, k) for k in range(v) for mb in range(lo, hi)]
    total = m * v
    warm = min((p - rank - 1) * 2 + (v - 1) * g, total)
    fwd = [("F", k * p + rank, mb) for mb, k in table]
    bwd = [("B", (v - 1 - k) * p + rank, mb) for mb, k in table]
    order = fwd[:warm]
    for i in range(total - warm):
        order += [fwd[warm + i], bwd[i]]
    return order + bwd[total - warm:]


@functools.lru_cache(maxsize=1024)
def rank_order(rank: int, p: int, m: int, schedule: PipelineSchedule, v: int = 1) -> tuple[tuple[str, int, int], ...]:
    """The tasks pipeline rank ``rank`` runs, in order: (kind, chunk, micro-batch), kind one of
    :data:`TASK_KINDS`. Chunk c (of p·v) lives on rank :func:`chunk_rank`; a forward of chunk c needs
    the forward of chunk c − 1, a backward (B, I, Bo) the backward of chunk c + 1 (the last chunk's,
    its own forward), a weight pass (W) its own chunk's input-gradient backward."""
    schedule = PipelineSchedule(schedule)
    if p > 1 and schedule is PipelineSchedule.ZB_H1:
        return tuple(_zb_h1_order(rank, p, m))
    if p > 1 and schedule is PipelineSchedule.DUALPIPE_V:
        return tuple(_dualpipev_order(rank, p, m))
    if schedule is PipelineSchedule.INTERLEAVED and v > 1:
        return tuple(_interleaved_order(rank, p, m, v))
    return tuple((kind, rank, mb) for kind, mb in schedule_order(rank, p, m, schedule))


@functools.lru_cache(maxsize=1024)
def order_peak_chunks(rank: int, p: int, m: int, schedule: PipelineSchedule, v: int = 1) -> int:
    """The most chunk-activations rank ``rank`` holds at once under its static order: +1 at each
    forward, −1 when the chunk's backward (its W, when split) ends."""
    held = peak = 0
    for kind, _, _ in rank_order(rank, p, m, schedule, v):
        if is_forward(kind):
            held += 1
            peak = max(peak, held)
        elif frees_activations(kind):
            held -= 1
    return peak


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
                if kind in _FORWARD:
                    dep = zero_row if c == 0 else f_end[c - 1][mb]
                elif kind == "W":
                    dep = b_end[c][mb]
                else:
                    dep = f_end[c][mb] if c == chunks - 1 else b_end[c + 1][mb]
                if dep is None:
                    break
                if kind in _FORWARD:
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
