"""Per-device speed variability and stragglers, and what they cost a synchronous step.

Model (per device, per step, independent and identically distributed): the device's time for the
step is ``base × X`` with ``X = J · S``, where

* ``J`` is lognormal jitter with mean 1: ``ln J ~ Normal(μ, σ²)``, ``μ = −σ²/2`` (so that
  ``E[J] = exp(μ + σ²/2) = 1``: the base step time stays the mean time of one device);
* ``S`` is a rare straggler: ``S = s`` (``straggler_slowdown``) with probability ``p``
  (``straggler_prob``), else 1.

Synchronous data/tensor/pipeline parallel training waits for its slowest participant at every
collective, so one step takes ``base × max_i X_i`` over the N devices. For N i.i.d. devices the
maximum has the order-statistic distribution ``F_max(x) = F(x)^N`` (David & Nagaraja, *Order
Statistics*, 3rd ed. 2003, §2.1), so it is sampled in O(1) per step whatever N is:

* the number of stragglers ``k ~ Binomial(N, p)``;
* the maximum of ``m`` i.i.d. lognormals is ``exp(μ + σ·Φ⁻¹(U^{1/m}))`` (inverse CDF of ``Φ^m``),
  evaluated as ``exp(μ − σ·Φ⁻¹(q))`` with ``q = 1 − U^{1/m} = −expm1(ln U / m)`` so that the upper
  tail keeps full precision when m is 16,384 and ``U^{1/m}`` rounds to 1;
* the step's factor is ``max(max of N−k plain devices, s × max of k stragglers)``.

The expected slowdown ``E[max_i X_i] = ∫₀^∞ (1 − F(x)^N) dx`` (the tail-integral formula for the
mean of a non-negative variable) is integrated numerically next to the sampled mean.

Both engines charge the jitter a device profile measured (``Efficiency.rank_jitter_sigma``,
calibrate/collectives_bench.py) as the expected wait for the slowest rank (:func:`sync_wait_seconds`); the
goodput simulation (sim/goodput.py) samples a :class:`Variability` a user gives per step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import integrate, special

from simtrain.errors import SpecError

__all__ = ["Variability", "expected_slowdown", "sample_step_factors", "sample_step_factors_brute",
           "sync_wait_seconds", "sigma_for_slowdown"]

_Q_MIN = 1e-300  # keeps Φ⁻¹ finite when a uniform draw sits exactly on 0 or 1 (probability 2⁻⁵³)
_Q_MAX = 1.0 - 1e-16


def _check(field: str, value: float, lo: float, hi: float, reason: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (lo <= value <= hi):
        raise SpecError.one(None, f"variability.{field}", f"{reason}, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Variability:
    """Per-device, per-step speed factor ``X = J · S`` (see the module docstring)."""

    jitter_sigma: float = 0.0
    """σ of ln J (lognormal, mean 1). 0.01 ≈ a 1 % coefficient of variation."""
    straggler_prob: float = 0.0
    """Probability that a device straggles in a given step."""
    straggler_slowdown: float = 1.0
    """Factor a straggling device's time is multiplied by (≥ 1)."""

    def __post_init__(self) -> None:
        _check("jitter_sigma", self.jitter_sigma, 0.0, 2.0, "must be a number in [0, 2]")
        _check("straggler_prob", self.straggler_prob, 0.0, 1.0, "must be a probability in [0, 1]")
        _check("straggler_slowdown", self.straggler_slowdown, 1.0, 1e6, "must be a number ≥ 1")

    @property
    def mu(self) -> float:
        """μ of ln J: −σ²/2 makes the jitter's mean exactly 1."""
        return -0.5 * self.jitter_sigma ** 2

    @property
    def trivial(self) -> bool:
        """True when every device always takes exactly the base time."""
        return self.jitter_sigma == 0.0 and (self.straggler_prob == 0.0 or self.straggler_slowdown == 1.0)

    def cdf(self, x: np.ndarray | float) -> np.ndarray:
        """F(x) = P(X ≤ x) of one device's factor (a two-component lognormal mixture)."""
        return np.exp(self._log_cdf(np.log(np.asarray(x, dtype=float))))

    def _log_cdf(self, y: np.ndarray) -> np.ndarray:
        """ln F(e^y), stable deep in the lower tail (log_ndtr) for the F^N of large N."""
        p, s = self.straggler_prob, math.log(self.straggler_slowdown)
        if self.jitter_sigma == 0.0:  # point masses at 1 and s
            plain, slow = np.where(y >= 0.0, 1.0, 0.0), np.where(y >= s, 1.0, 0.0)
            with np.errstate(divide="ignore"):
                return np.log((1.0 - p) * plain + p * slow)
        z = (y - self.mu) / self.jitter_sigma
        parts = [special.log_ndtr(z) + math.log1p(-p)] if p < 1.0 else []
        if p > 0.0:
            parts.append(special.log_ndtr(z - s / self.jitter_sigma) + math.log(p))
        return np.logaddexp.reduce(np.stack(parts), axis=0)


def _max_lognormal(m: np.ndarray, u: np.ndarray, mu: float, sigma: float) -> np.ndarray:
    """exp(μ + σ·Φ⁻¹(u^{1/m})): the maximum of m i.i.d. lognormals; 0 where m == 0 (nobody)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.clip(-np.expm1(np.log(u) / np.maximum(m, 1)), _Q_MIN, _Q_MAX)
    out = np.exp(mu - sigma * special.ndtri(q))
    return np.where(m > 0, out, 0.0)


def sample_step_factors(var: Variability, devices: int, steps: int, rng: np.random.Generator) -> np.ndarray:
    """``steps`` draws of max over ``devices`` i.i.d. factors, O(1) per step (order statistics).

    Every step consumes exactly one binomial and two uniforms, so a seed fixes the whole sequence."""
    if devices < 1:
        raise SpecError.one(None, "variability.devices", f"must be ≥ 1, got {devices!r}")
    k = rng.binomial(devices, var.straggler_prob, size=steps)
    u_plain, u_slow = 1.0 - rng.random(steps), 1.0 - rng.random(steps)  # in (0, 1]
    plain = _max_lognormal(devices - k, u_plain, var.mu, var.jitter_sigma)
    slow = var.straggler_slowdown * _max_lognormal(k, u_slow, var.mu, var.jitter_sigma)
    return np.maximum(plain, slow)


def sample_step_factors_brute(var: Variability, devices: int, steps: int, rng: np.random.Generator) -> np.ndarray:
    """The same distribution drawn device by device (O(N) per step): the cross-check for small N."""
    jitter = np.exp(var.mu + var.jitter_sigma * rng.standard_normal((steps, devices)))
    slow = np.where(rng.random((steps, devices)) < var.straggler_prob, var.straggler_slowdown, 1.0)
    return (jitter * slow).max(axis=1)


def expected_slowdown(var: Variability, devices: int) -> float:
    """E[max over ``devices`` of X] = ∫₀^∞ (1 − F(x)^N) dx, integrated in y = ln x.

    With σ = 0 it is exact: s·(1 − (1−p)^N) + (1−p)^N (some device straggles, or none does)."""
    if devices < 1:
        raise SpecError.one(None, "variability.devices", f"must be ≥ 1, got {devices!r}")
    p, s, sigma = var.straggler_prob, var.straggler_slowdown, var.jitter_sigma
    if sigma == 0.0:
        none = (1.0 - p) ** devices
        return s * (1.0 - none) + none
    lo = var.mu - 9.0 * sigma  # F(e^lo) < 1e-18: F^N = 0, the integrand there is e^y
    hi = var.mu + math.log(s) + 12.0 * sigma  # N·(1 − F) < 1e-25 for N ≤ 1e7

    def integrand(y: float) -> float:  # (1 − F(e^y)^N)·e^y, with F^N = exp(N·ln F) kept stable
        return -math.expm1(devices * float(var._log_cdf(np.array([y]))[0])) * math.exp(y)

    points = sorted({var.mu, var.mu + math.log(s), var.mu + sigma * math.sqrt(2.0 * math.log(devices + 1))})
    value, _ = integrate.quad(integrand, lo, hi, points=[x for x in points if lo < x < hi],
                              limit=400, epsabs=0.0, epsrel=1e-11)
    return math.exp(lo) + value


@lru_cache(maxsize=1024)
def _jitter_slowdown(sigma: float, ranks: int) -> float:
    return expected_slowdown(Variability(jitter_sigma=sigma), ranks)


def sync_wait_seconds(work_s: float, ranks: int, sigma: float) -> float:
    """Expected seconds a synchronous step spends waiting for its slowest rank: ``work_s`` (one rank's
    own work between the step's start and its gradient sync) times ``E[max of ranks J] − 1``, J the
    lognormal jitter with mean 1 and ``σ = sigma``. 0 for one rank or no jitter: the mean rank's time
    is the base the cost layer computes, so only the wait for the slowest is added."""
    if ranks <= 1 or sigma <= 0.0 or work_s <= 0.0:
        return 0.0
    return work_s * (_jitter_slowdown(float(sigma), int(ranks)) - 1.0)


def sigma_for_slowdown(ratio: float, ranks: int) -> float:
    """The jitter σ whose ``ranks`` i.i.d. lognormals (mean 1) have ``E[max] = ratio``: the inverse of
    :func:`expected_slowdown` in σ (it rises monotonically with σ). Two ranks have the closed form
    ``E[max] = 2·Φ(σ/√2)``, so σ = √2·Φ⁻¹(ratio / 2). 0 for a ratio ≤ 1 (no measurable wait)."""
    from scipy import optimize
    if ranks < 2:
        raise SpecError.one(None, "ranks", f"a wait for the slowest needs at least 2 ranks, got {ranks!r}")
    if not math.isfinite(ratio) or ratio <= 1.0:
        return 0.0
    if ranks == 2:
        return min(2.0, math.sqrt(2.0) * float(special.ndtri(min(ratio / 2.0, 1.0 - 1e-16))))
    top = 2.0
    if _jitter_slowdown(top, ranks) <= ratio:
        return top
    return float(optimize.brentq(lambda s: _jitter_slowdown(s, ranks) - ratio, 0.0, top, xtol=1e-10))
