"""The rate at which the framework draws dropout's random numbers (CPU).

PyTorch's CPU dropout (``aten::dropout`` → ``bernoulli_`` on a tensor shaped like the input, then a
multiply) draws one Bernoulli sample per element from the CPU generator, a Mersenne Twister
(Matsumoto & Nishimura 1998) that ATen steps one element at a time under a lock: it does not
vectorise or spread over threads, and at ≈ 8 ns per element it costs ~50× the multiply it feeds
(measured on this project's EPYC machine). A CUDA dropout kernel draws Philox numbers inside its
memory-bound pass, so the bench measures CPUs only.

The bench times ``buf.bernoulli_(0.9)`` (draw and write) and ``buf.fill_(0.9)`` (the same write)
into one preallocated fp32 buffer per size; the difference is the draws alone, so the rate
(``Efficiency.rng_draws_per_s``) is numel / (t_draw − t_fill), the median over sizes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from simtrain.calibrate.bench_fresh_pages import median_pair_rate, paired_rows
from simtrain.calibrate.records import Row

if TYPE_CHECKING:
    from simtrain.calibrate.bench_ops import Bench, Grid

__all__ = ["KEEP_PROBABILITY", "bench_rng", "fit_rng"]


KEEP_PROBABILITY = 0.9
"""Bernoulli parameter of the bench (dropout p = 0.1); the draw's cost does not depend on it."""


def bench_rng(b: Bench, grid: Grid) -> list[Row]:
    """CPU only: ``buf.bernoulli_(0.9)`` (draws) and ``buf.fill_(0.9)`` (same write) per size."""
    return paired_rows(b, "rng", "draw", grid.rng_numel, lambda _n, buf: buf.bernoulli_(KEEP_PROBABILITY),
                       lambda _n, buf: buf.fill_(KEEP_PROBABILITY))


def fit_rng(rows: Sequence[Row]) -> dict[str, float]:
    """``rng_draws_per_s``: the median over sizes of numel / (t_draw − t_fill); empty when no usable
    pair was measured."""
    rate = median_pair_rate(rows, "rng", "draw", 1.0)
    return {} if rate is None else {"rng_draws_per_s": rate}
