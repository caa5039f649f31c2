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
"""

from __future__ import annotations

import functools

from simtrain.glossary import PipelineSchedule

__all__ = ["pipeline_time_s", "bubble_fraction", "in_flight_microbatches", "schedule_order", "rank_order",
           "pipeline_finish_s", "interleave_group"]


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
    """Micro-batches' worth of (whole-stage) activations stage ``stage`` holds at its peak."""
    if schedule is PipelineSchedule.GPIPE or p == 1:
        return float(m if p > 1 else 1)
    if schedule is PipelineSchedule.INTERLEAVED:
        peak = (p - stage) + (p - 1 - stage) / v if stage else p * (1 + (p - 1) / (p * v))
        return float(min(peak, m))
    return float(min(p - stage, m))


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
    """The tasks pipeline rank ``rank`` runs, in order: ('F' | 'B', chunk, micro-batch). Chunk c (of
    p·v) lives on rank c mod p; a forward of chunk c needs the forward of chunk c − 1, a backward
    needs the backward of chunk c + 1 (the last chunk's, its own forward)."""
    schedule = PipelineSchedule(schedule)
    if schedule is PipelineSchedule.INTERLEAVED and v > 1:
        return tuple(_interleaved_order(rank, p, m, v))
    return tuple((kind, rank, mb) for kind, mb in schedule_order(rank, p, m, schedule))


def pipeline_finish_s(fw_s, bw_s, m: int, schedule: PipelineSchedule, v: int = 1, start_s=None) -> tuple[float, ...]:
    """When each rank ends its last backward: ``fw_s[r]`` / ``bw_s[r]`` are the seconds of one chunk's
    forward / backward task on rank r (sends to the next rank included), ``start_s[r]`` when rank r
    may start (default 0). Exact for the static orders of :func:`rank_order` (memoised)."""
    p = len(fw_s)
    start = tuple(float(x) for x in start_s) if start_s is not None else (0.0,) * p
    return _finish(tuple(map(float, fw_s)), tuple(map(float, bw_s)), m, PipelineSchedule(schedule), v, start)


@functools.lru_cache(maxsize=4096)
def _finish(fw: tuple, bw: tuple, m: int, schedule: PipelineSchedule, v: int, start: tuple) -> tuple[float, ...]:
    p = len(fw)
    if p == 1:  # no pipeline: the micro-batches back to back
        return (start[0] + m * v * (fw[0] + bw[0]),)
    chunks = p * v
    orders = [rank_order(r, p, m, schedule, v) for r in range(p)]
    f_end: list[list] = [[None] * m for _ in range(chunks)]
    b_end: list[list] = [[None] * m for _ in range(chunks)]
    ptr, free = [0] * p, list(start)
    remaining = sum(len(o) for o in orders)
    while remaining:
        moved = 0
        for r in range(p):
            order, i, t, n = orders[r], ptr[r], free[r], len(orders[r])
            while i < n:
                kind, c, mb = order[i]
                if kind == "F":
                    dep = 0.0 if c == 0 else f_end[c - 1][mb]
                    if dep is None:
                        break
                    t = (t if t >= dep else dep) + fw[r]
                    f_end[c][mb] = t
                else:
                    dep = f_end[c][mb] if c == chunks - 1 else b_end[c + 1][mb]
                    if dep is None:
                        break
                    t = (t if t >= dep else dep) + bw[r]
                    b_end[c][mb] = t
                i += 1
            moved += i - ptr[r]
            ptr[r], free[r] = i, t
        if not moved:
            from simtrain.errors import SimtrainError
            raise SimtrainError(f"pipeline schedule {schedule.value} deadlocks (p={p}, m={m}, v={v})")
        remaining -= moved
    return tuple(free)
