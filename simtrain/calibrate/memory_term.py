"""The memory term of one-shot calibration: ``Stack.transient_memory_scale`` from measured peaks.

The memory model is linear in the scale on its transient tensors (activations kept for the backward
and the backward's working set, ``parallel/memory_plan.py``): a record's predicted peak of the kind it
measured (reserved or allocated, ``RunRecord.peak_memory_kind``) is ``base + f · slope``, read off two
estimates (f = 1 and f = 2) so every mechanism of the memory model stays in the loop. ``f`` minimises
the relative residuals Σ ((base + f · slope) / measured − 1)² over the records that give a peak, in
closed form, clipped to :data:`MEMORY_SCALE_BOUNDS` (at a bound its uncertainty is infinite). Its
uncertainty is the standard error of that least-squares slope with the residual scatter floored at
:data:`MEMORY_NOISE`. The time factors
never touch memory, so the two fits are independent.
"""

from __future__ import annotations

import math

from simtrain.specs.stack_resolve import named_stack

__all__ = ["MEMORY_SCALE_BOUNDS", "MEMORY_NOISE", "with_memory_scale", "predicted_peak", "fit_memory_scale"]

MEMORY_SCALE_BOUNDS = (0.5, 2.0)
"""A measured peak may halve or double the modelled transient memory, no more: beyond that the
layout or the recompute policy is wrong, not the model's bytes per tensor."""

MEMORY_NOISE = 0.01
"""Floor of the relative residual scatter: a peak reading moves by ~1 % between steps and ranks
(allocator state)."""


def with_memory_scale(cfg, device, scale: float):
    """``cfg`` with its stack's ``transient_memory_scale`` set to ``scale`` (the stack it runs on
    ``device``: its own, or the GPU default when it names none)."""
    stack = named_stack(cfg, device).with_overrides(transient_memory_scale=scale)
    return cfg.model_copy(update={"stack": stack})


def predicted_peak(rec, scale: float = 1.0) -> float | None:
    """The record's predicted peak of the kind it measured, with the transient scale ``scale``."""
    from simtrain.estimator import estimate
    r = estimate(rec.model, rec.cluster, with_memory_scale(rec.config, rec.cluster.device, scale))
    if r.memory is None:
        return None
    return r.memory.total_bytes if rec.peak_memory_kind == "allocated" else r.memory.reserved_bytes


def fit_memory_scale(records) -> tuple[float, float] | None:
    """(scale, relative standard error) from the records that give ``peak_memory_bytes``; None when
    none does (or none has transient memory to scale)."""
    rows = []
    for rec in records:
        if rec.peak_memory_bytes is None:
            continue
        one, two = predicted_peak(rec, 1.0), predicted_peak(rec, 2.0)
        if one is None or two is None or two <= one:
            continue
        slope = two - one
        rows.append((one - slope, slope, float(rec.peak_memory_bytes)))
    if not rows:
        return None
    # relative least squares: residual_i = (base_i + f · slope_i) / m_i − 1 = f · x_i − y_i
    xs = [s / m for _, s, m in rows]
    ys = [1.0 - b / m for b, _, m in rows]
    sxx = sum(x * x for x in xs)
    lo, hi = MEMORY_SCALE_BOUNDS
    raw = sum(x * y for x, y in zip(xs, ys, strict=True)) / sxx
    f = min(hi, max(lo, raw))
    if f != raw:  # at a bound: the peaks ask for more than the term may give
        return f, math.inf
    dof = max(1, len(rows) - 1)
    scatter = max(MEMORY_NOISE, math.sqrt(sum((f * x - y) ** 2 for x, y in zip(xs, ys, strict=True)) / dof))
    return f, scatter / math.sqrt(sxx) / f
