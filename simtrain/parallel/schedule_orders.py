"""The pipeline schedules' static per-rank task orders (:mod:`simtrain.parallel.schedule` evaluates
them): GPipe, Megatron-LM's 1F1B, Megatron-core's interleaved table, ZB-H1 and DualPipeV (the
schedules and their sources are in that module's docstring), the task kinds they are made of, which
chunks a rank holds, and the peak of chunk activations an order keeps.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from simtrain.glossary import PipelineSchedule

__all__ = ["SPLIT_BACKWARD", "TASK_KINDS", "FORWARD_KINDS", "BACKWARD_KINDS", "is_forward", "is_backward",
           "frees_activations", "chunk_rank", "stage_chunks", "schedule_order", "interleave_group",
           "rank_order", "order_peak_chunks", "ChunkWindows", "ONE_CHUNK", "chunk_marks", "chunk_windows"]


SPLIT_BACKWARD = frozenset({PipelineSchedule.ZB_H1, PipelineSchedule.DUALPIPE_V})
"""Schedules that run a backward's input-gradient (I) and weight-gradient (W) halves as two tasks."""

TASK_KINDS = ("F", "B", "I", "W", "Fo", "Bo")
"""Task kinds: forward, full backward (I + W), input-gradient backward, weight-gradient backward, and
a forward / full backward run as an overlapped pair (DualPipe)."""

FORWARD_KINDS, BACKWARD_KINDS = frozenset({"F", "Fo"}), frozenset({"B", "I", "Bo"})
_FREES = frozenset({"B", "Bo", "W"})
"""Task kinds after which the chunk's activations are released."""


def is_forward(kind: str) -> bool:
    """A forward task (its end is what the next chunk's forward waits for)."""
    return kind in FORWARD_KINDS


def is_backward(kind: str) -> bool:
    """A backward task whose end the previous chunk's backward waits for (B, I, Bo: not W)."""
    return kind in BACKWARD_KINDS


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


_WORK = {"F": (1.0, 0.0), "Fo": (1.0, 0.0), "B": (0.0, 1.0), "Bo": (0.0, 1.0), "I": (0.0, 0.5), "W": (0.0, 0.5)}
"""A task's work in (forward tasks, backward tasks) of one chunk: a split backward's halves as half each."""


@dataclass(frozen=True)
class ChunkWindows:
    """When a rank holding several model chunks can run each chunk's share of the per-step
    data-parallel sync, as work counts of its static order (forward tasks, backward tasks).

    Megatron-core's interleaved schedule launches a chunk's gradient reduce-scatter as soon as its
    last micro-batch's backward ends, and the parameter all-gather of chunk j + 1 at chunk j's first
    forward (chunks 0 and 1 at the step's start): ``forward_backward_pipelining_with_interleaving``,
    ``grad_sync_func`` / ``param_sync_func`` per model chunk (megatron/core/pipeline_parallel/
    schedules.py). One chunk per rank: both tuples are empty and the sync hides behind the rank's
    last backward / first forward task alone."""

    grad_after: tuple[tuple[float, float], ...] = ()
    """Per chunk but the last to finish, earliest first: the work the rank still runs after that
    chunk's gradients are complete."""
    gather: tuple[tuple[tuple[float, float], tuple[float, float]], ...] = ()
    """Per chunk but the first to start, in order: (work before its gather is launched, work before
    its first forward, which waits for the gather)."""


ONE_CHUNK = ChunkWindows()
"""The windows of a rank that holds one chunk: its whole sync behind its last backward / first forward."""


def chunk_marks(order) -> tuple[dict[int, int], dict[int, int]]:
    """(index of each chunk's last gradient-completing task — B, Bo or W —, index of each chunk's
    first forward) in a rank's static order (:func:`rank_order`)."""
    last: dict[int, int] = {}
    first: dict[int, int] = {}
    for i, (kind, chunk, _) in enumerate(order):
        if frees_activations(kind):  # the chunk's weight gradients of this micro-batch are in
            last[chunk] = i
        if is_forward(kind):
            first.setdefault(chunk, i)
    return last, first


@functools.lru_cache(maxsize=1024)
def chunk_windows(rank: int, p: int, m: int, schedule: PipelineSchedule, v: int = 1) -> ChunkWindows:
    """The :class:`ChunkWindows` of pipeline rank ``rank`` under its static order (:func:`rank_order`);
    a rank with one chunk gets :data:`ONE_CHUNK` without walking its order."""
    schedule = PipelineSchedule(schedule)
    if len(stage_chunks(rank, p, v, schedule)) < 2:
        return ONE_CHUNK
    order = rank_order(rank, p, m, schedule, v)
    last, first = chunk_marks(order)
    if len(last) < 2:
        return ONE_CHUNK
    before = [(0.0, 0.0)]  # work before task i, forward and backward
    for kind, _, _ in order:
        f, b = before[-1]
        before.append((f + _WORK[kind][0], b + _WORK[kind][1]))
    total = before[-1]
    grad = tuple((total[0] - before[i + 1][0], total[1] - before[i + 1][1]) for i in sorted(last.values())[:-1])
    needs = [before[i] for i in sorted(first.values())]
    gather = tuple(((0.0, 0.0) if j == 1 else needs[j - 1], needs[j]) for j in range(1, len(needs)))
    return ChunkWindows(grad, gather)
