"""Timing one callable: warm-ups, an inner loop long enough for the clock, repeats, median and spread.

Method: after ``warmup`` calls, one timed call gives a first estimate ``t1``; each sample then times
``inner = ceil(min_sample_s / t1)`` back-to-back calls (so timer resolution and Python overhead per
sample stay small against the sample) and divides by ``inner``. Samples repeat until ``repeats`` are
taken or ``max_total_s`` has passed (never fewer than 3). On CPU the clock is ``time.perf_counter``;
on CUDA a pair of ``torch.cuda.Event(enable_timing=True)`` brackets the inner loop and the host waits
on the end event, so the time is device time of the queued kernels, not of their launch.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Timing", "TimingPlan", "time_call", "time_pair", "timing_of", "synchronize", "median_ci"]


@dataclass(frozen=True)
class Timing:
    """Time per call: median and the 10th/90th percentiles over ``repeats`` samples of ``inner`` calls."""

    median_s: float
    p10_s: float
    p90_s: float
    repeats: int
    inner: int
    ci_low_s: float | None = None
    """95 % percentile-bootstrap interval of the median (:func:`median_ci`)."""
    ci_high_s: float | None = None


@dataclass(frozen=True)
class TimingPlan:
    """How hard to time: quick runs take fewer, shorter samples."""

    warmup: int = 2
    repeats: int = 7
    min_sample_s: float = 2e-3
    max_total_s: float = 0.5
    max_inner: int = 10_000


def median_ci(samples: Sequence[float], confidence: float = 0.95, resamples: int = 2000,
              seed: int = 0) -> tuple[float, float, float]:
    """(median, low, high): the sample median and its percentile-bootstrap interval."""
    x = np.asarray(samples, dtype=float)
    if x.size == 0:
        raise ValueError("median_ci needs at least one sample")
    med = float(np.median(x))
    if x.size == 1:
        return med, med, med
    rng = np.random.default_rng(seed)
    meds = np.median(x[rng.integers(0, x.size, size=(resamples, x.size))], axis=1)
    tail = 100.0 * (1.0 - confidence) / 2.0
    lo, hi = (float(v) for v in np.percentile(meds, [tail, 100.0 - tail]))
    return med, min(lo, med), max(hi, med)



def synchronize(device: str) -> None:
    """Wait for queued device work (a no-op on CPU, where torch ops are synchronous)."""
    if device == "cuda":
        import torch
        torch.cuda.synchronize()


def _sample_cpu(fn: Callable[[], object], inner: int) -> float:
    start = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - start) / inner


def _sample_cuda(fn: Callable[[], object], inner: int) -> float:
    import torch
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(inner):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e-3 / inner  # elapsed_time is in milliseconds


def _inner_calls(plan: TimingPlan, call_s: float) -> int:
    """Calls per sample so one sample lasts at least ``plan.min_sample_s`` (at most ``max_inner``)."""
    return int(min(plan.max_inner, max(1, math.ceil(plan.min_sample_s / call_s))))


def time_call(fn: Callable[[], object], plan: TimingPlan = TimingPlan(), device: str = "cpu") -> Timing:
    """Median / p10 / p90 seconds per call of ``fn`` on ``device`` ("cpu" or "cuda")."""
    sample = _sample_cuda if device == "cuda" else _sample_cpu
    for _ in range(plan.warmup):
        fn()
    synchronize(device)
    t1 = max(sample(fn, 1), 1e-9)
    inner = _inner_calls(plan, t1)
    times: list[float] = []
    deadline = time.perf_counter() + plan.max_total_s
    while len(times) < plan.repeats and (len(times) < 3 or time.perf_counter() < deadline):
        times.append(sample(fn, inner))
    return timing_of(times, inner)


def time_pair(fn_a: Callable[[], object], fn_b: Callable[[], object], plan: TimingPlan = TimingPlan(),
              device: str = "cpu") -> tuple[Timing, Timing]:
    """:func:`time_call` of two callables whose *difference* is the measurement (a cost with and
    without one mechanism), their samples alternated a, b, a, b, …: a change of machine speed during
    the run then moves both medians alike instead of only the one timed in it. Both take the same
    number of samples of the same ``inner`` count (set by the slower one)."""
    sample = _sample_cuda if device == "cuda" else _sample_cpu
    for _ in range(plan.warmup):
        fn_a()
        fn_b()
    synchronize(device)
    t1 = max(sample(fn_a, 1), sample(fn_b, 1), 1e-9)
    inner = _inner_calls(plan, t1)
    a: list[float] = []
    b: list[float] = []
    deadline = time.perf_counter() + 2 * plan.max_total_s
    while len(a) < plan.repeats and (len(a) < 3 or time.perf_counter() < deadline):
        a.append(sample(fn_a, inner))
        b.append(sample(fn_b, inner))
    return timing_of(a, inner), timing_of(b, inner)


def timing_of(times: list[float], inner: int = 1) -> Timing:
    """Median, p10 / p90 and the median's 95 % bootstrap interval of per-call sample times."""
    arr = np.asarray(times)
    p10, med, p90 = (float(v) for v in np.percentile(arr, [10, 50, 90]))
    _, lo, hi = median_ci(arr)
    return Timing(median_s=med, p10_s=min(p10, med), p90_s=max(p90, med), repeats=len(times), inner=inner,
                  ci_low_s=lo, ci_high_s=hi)
