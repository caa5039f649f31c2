"""Fitting communication: collectives (gloo / NCCL) and host↔device copies, least squares on log time.

Two levels, both stored in ``Efficiency.extra`` (keys below; every value SI):

1. **The estimator's model** (what ``estimate`` will use): per backend, one link — per-rank
   per-direction bandwidth ``B`` and per-step latency ``α`` — plus the per-collective base latency
   ``collective_base_latency_s`` (the key :func:`simtrain.cost.collectives.collective_time` reads), fitted
   through ``collective_time`` itself on a one-dimension switch topology
   (:func:`simtrain.calibrate.predict.predict_collective`) over the all-reduce rows (every size and
   world size) when there are at least two — data parallelism's gradient sync is what the link is
   for, and gloo's other collectives do not share one α: at 1 KiB on 2 ranks broadcast takes ~0.2 ms,
   all-gather ~1 ms, all-reduce ~2.3 ms, which no single ring/tree latency reproduces — else over
   every collective. The residuals still list every collective row against this link. Keys:
   ``link.<backend>.bytes_per_s``, ``link.<backend>.latency_s``, and ``collective_base_latency_s``.
2. **Plain alpha-beta per collective** (Hockney's model, t = α + S/β_bw; Thakur et al. 2005 §2), for
   reading off one collective at one world size: ``collective.<backend>.<op>.w<n>.alpha_s`` and
   ``collective.<backend>.<op>.w<n>.algbw_bytes_per_s`` (S / bandwidth part: nccl-tests' algbw at
   large S). Host↔device copies the same way: ``<h2d|d2h>.<pinned|pageable>.alpha_s`` and
   ``.bytes_per_s``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from simtrain.calibrate.predict import predict_collective
from simtrain.calibrate.records import Row
from simtrain.specs.hardware import Efficiency

__all__ = ["AlphaBeta", "LinkFit", "fit_alpha_beta", "fit_backend_link", "fit_collectives",
           "fit_host_device"]


@dataclass(frozen=True)
class AlphaBeta:
    alpha_s: float
    bytes_per_s: float
    rms_log_error: float


@dataclass(frozen=True)
class LinkFit:
    """The estimator-level fit of one backend: link bandwidth and latency, base latency, residuals."""

    backend: str
    bandwidth_bytes_per_s: float
    latency_s: float
    base_latency_s: float
    rows: tuple[Row, ...]
    predicted_s: tuple[float, ...]


def _log_fit(fun: Callable[[np.ndarray], np.ndarray], x0: np.ndarray, lo: np.ndarray, hi: np.ndarray):
    return least_squares(fun, np.clip(x0, lo, hi), bounds=(lo, hi), loss="soft_l1", f_scale=0.2,
                         x_scale="jac", max_nfev=400)


def fit_alpha_beta(sizes: Sequence[float], times: Sequence[float]) -> AlphaBeta:
    """t = α + S / B fitted on log t. Starts from the smallest time (α) and the largest S / t (B)."""
    s, t = np.asarray(sizes, float), np.asarray(times, float)

    def resid(x: np.ndarray) -> np.ndarray:
        return np.log(np.exp(x[0]) + s / np.exp(x[1])) - np.log(t)

    x0 = np.array([math.log(t.min() * 0.5), math.log(max((s / t).max(), 1.0))])
    res = _log_fit(resid, x0, np.array([math.log(1e-9), math.log(1e3)]), np.array([math.log(10.0), math.log(1e14)]))
    rms = float(np.sqrt(np.mean(resid(res.x) ** 2)))
    return AlphaBeta(float(math.exp(res.x[0])), float(math.exp(res.x[1])), rms)


def _with_collective(eff: Efficiency, base_latency_s: float) -> Efficiency:
    extra = dict(eff.extra, collective_base_latency_s=base_latency_s, collective_step_overhead_s=0.0)
    return eff.model_copy(update={"link_bandwidth_fraction": 1.0, "link_latency_scale": 1.0, "extra": extra})


def fit_backend_link(rows: Sequence[Row], eff: Efficiency) -> LinkFit:
    """Fit (B, α, base latency) of one backend through ``collective_time`` (see module docstring).
    With fewer than four rows the base latency is held at 0 and only B and α are fitted."""
    rows = tuple(rows)
    t = np.array([r.median_s for r in rows])
    with_base = len(rows) >= 4

    def unpack(x: np.ndarray) -> tuple[float, float, float]:
        return math.exp(x[0]), math.exp(x[1]), (math.exp(x[2]) if with_base else 0.0)

    def predict(x: np.ndarray) -> np.ndarray:
        bw, lat, base = unpack(x)
        e = _with_collective(eff, base)
        return np.array([predict_collective(r, bw, lat, e) for r in rows])

    def resid(x: np.ndarray) -> np.ndarray:
        return np.log(predict(x)) - np.log(t)

    big = max(rows, key=lambda r: r.bytes_moved)
    x0 = np.log([max(big.bytes_moved / big.median_s, 1e3), t.min() / 4, t.min() / 4])
    lo, hi = np.log([1e3, 1e-9, 1e-9]), np.log([1e14, 1.0, 1.0])
    k = 3 if with_base else 2
    res = _log_fit(resid, x0[:k], lo[:k], hi[:k])
    bw, lat, base = unpack(res.x)
    return LinkFit(rows[0].params.get("backend", "link"), bw, lat, base, rows, tuple(float(p) for p in predict(res.x)))


def _extend(lf: LinkFit, rows: Sequence[Row], eff: Efficiency) -> LinkFit:
    """``lf`` with the predictions for further rows appended (same link, no refit)."""
    e = _with_collective(eff, lf.base_latency_s)
    more = tuple(predict_collective(r, lf.bandwidth_bytes_per_s, lf.latency_s, e) for r in rows)
    return LinkFit(lf.backend, lf.bandwidth_bytes_per_s, lf.latency_s, lf.base_latency_s,
                   lf.rows + tuple(rows), lf.predicted_s + more)


def _groups(rows: Sequence[Row], key: Callable[[Row], tuple]) -> dict[tuple, list[Row]]:
    out: dict[tuple, list[Row]] = {}
    for r in rows:
        out.setdefault(key(r), []).append(r)
    return out


def fit_collectives(rows: Sequence[Row], eff: Efficiency) -> tuple[dict[str, float], list[LinkFit]]:
    """Both levels for every backend present: (extra keys, estimator-level fits)."""
    extra: dict[str, float] = {}
    fits: list[LinkFit] = []
    per_op = _groups(rows, lambda r: (r.params["backend"], r.bench, int(r.params["world_size"])))
    for (backend, op, world), grp in sorted(per_op.items()):
        if len(grp) >= 2:
            ab = fit_alpha_beta([r.bytes_moved for r in grp], [r.median_s for r in grp])
            extra[f"collective.{backend}.{op}.w{world}.alpha_s"] = ab.alpha_s
            extra[f"collective.{backend}.{op}.w{world}.algbw_bytes_per_s"] = ab.bytes_per_s
    for (backend,), grp in sorted(_groups(rows, lambda r: (r.params["backend"],)).items()):
        if len(grp) >= 2:
            reduce = [r for r in grp if r.bench == "all_reduce"]
            lf = fit_backend_link(reduce if len(reduce) >= 2 else grp, eff)
            if len(reduce) >= 2:  # the other collectives' residuals against the same link
                lf = _extend(lf, [r for r in grp if r.bench != "all_reduce"], eff)
            fits.append(lf)
            extra[f"link.{backend}.bytes_per_s"] = lf.bandwidth_bytes_per_s
            extra[f"link.{backend}.latency_s"] = lf.latency_s
            extra[f"collective.{backend}.base_latency_s"] = lf.base_latency_s
    return extra, fits


def fit_host_device(rows: Sequence[Row]) -> dict[str, float]:
    """Alpha-beta of h2d / d2h copies, pinned and pageable (CUDA measurements only)."""
    extra: dict[str, float] = {}
    for (bench, pinned), grp in sorted(_groups(rows, lambda r: (r.bench, bool(r.params["pinned"]))).items()):
        if len(grp) >= 2:
            ab = fit_alpha_beta([r.bytes_moved for r in grp], [r.median_s for r in grp])
            tag = f"{bench}.{'pinned' if pinned else 'pageable'}"
            extra[f"{tag}.alpha_s"], extra[f"{tag}.bytes_per_s"] = ab.alpha_s, ab.bytes_per_s
    return extra
