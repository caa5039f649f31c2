"""Per-device variability: the order-statistic sampler against brute force, the expected slowdown
against hand-derived closed forms, determinism and bad input."""

import math

import numpy as np
import pytest
from scipy import stats

from simtrain.errors import SpecError
from simtrain.sim.variability import (
    Variability,
    expected_slowdown,
    sample_step_factors,
    sample_step_factors_brute,
)


def _phi(x: float) -> float:
    """Standard normal CDF from the error function (a route independent of scipy.special)."""
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def test_one_device_mean_is_one():
    # μ = −σ²/2 makes E[J] = exp(μ + σ²/2) = 1: the base step time is one device's mean time
    assert expected_slowdown(Variability(jitter_sigma=0.3), 1) == pytest.approx(1.0, rel=1e-9)


def test_two_devices_closed_form():
    # E[max(X1, X2)] for i.i.d. lognormal with mean 1 is 2·Φ(σ/√2): E[max] = 2·E[X1·1{X1 > X2}]
    # = 2·E[e^{μ+σZ}·Φ(Z)] = 2·e^{μ+σ²/2}·P(W ≤ Z'), Z' ~ N(σ, 1) → 2·Φ(σ/√2)
    sigma = 0.3
    assert expected_slowdown(Variability(jitter_sigma=sigma), 2) == pytest.approx(2 * _phi(sigma / math.sqrt(2)),
                                                                                rel=1e-9)


def test_stragglers_without_jitter_closed_form():
    # σ = 0: the step is slow (×s) unless no device straggles, probability (1 − p)^N
    var = Variability(straggler_prob=0.01, straggler_slowdown=2.0)
    assert expected_slowdown(var, 100) == pytest.approx(2.0 * (1 - 0.99 ** 100) + 0.99 ** 100, rel=1e-12)
    assert expected_slowdown(var, 100) == pytest.approx(1.6339676587267709, rel=1e-12)
    factors = sample_step_factors(var, 100, 20_000, np.random.default_rng(0))
    assert set(np.unique(factors)) == {1.0, 2.0}
    # fraction of slow steps: binomial, 1 − 0.99^100 = 0.63397, standard error sqrt(p(1−p)/n) = 0.0034
    assert abs((factors == 2.0).mean() - (1 - 0.99 ** 100)) < 4 * 0.0034


@pytest.mark.parametrize("devices", [1, 4, 16])
def test_order_statistic_matches_brute_force(devices):
    var = Variability(jitter_sigma=0.05, straggler_prob=0.01, straggler_slowdown=2.0)
    fast = sample_step_factors(var, devices, 40_000, np.random.default_rng(1))
    brute = sample_step_factors_brute(var, devices, 40_000, np.random.default_rng(2))
    # same distribution: a two-sample Kolmogorov–Smirnov test does not reject at 1 % (seeded, so fixed)
    assert stats.ks_2samp(fast, brute).pvalue > 0.01
    exact = expected_slowdown(var, devices)
    for sample in (fast, brute):
        stderr = sample.std() / math.sqrt(sample.size)
        assert abs(sample.mean() - exact) < 4 * stderr


def test_large_n_sampled_mean_matches_integral():
    var = Variability(jitter_sigma=0.01, straggler_prob=1e-4, straggler_slowdown=1.5)
    sample = sample_step_factors(var, 16_384, 200_000, np.random.default_rng(3))
    exact = expected_slowdown(var, 16_384)
    assert abs(sample.mean() - exact) < 4 * sample.std() / math.sqrt(sample.size)
    # 16,384 devices × 1e-4 ≈ 1.6 stragglers per step: P(none) = (1 − 1e-4)^16384 = 0.194, so most
    # steps run at ≈ 1.5 × (jitter max) and the mean sits between 1.5·0.806 + 0.194 and 1.5 × 1.05
    assert 1.4 < exact < 1.5 * 1.05


def test_jitter_max_grows_with_devices():
    var = Variability(jitter_sigma=0.01)
    values = [expected_slowdown(var, n) for n in (1, 8, 512, 16_384)]
    assert values == sorted(values) and values[0] == pytest.approx(1.0, rel=1e-9)


def test_large_n_integral_by_the_density_route():
    # a second route to E[max]: ∫ e^{μ+σz} · N·φ(z)·Φ(z)^{N−1} dz (the density of the max of N
    # standard normals) on a fine grid, against the tail integral ∫(1 − F^N) the module uses;
    # the max of 16,384 standard normals has mean ≈ 3.97, so the factor is ≈ e^{0.0397} ≈ 1.0405
    sigma, n = 0.01, 16_384
    z = np.linspace(-6.0, 10.0, 160_001)  # below −6 the density is < 1e-300 (Φ(−6)^N)
    density = n * np.exp(-z * z / 2) / math.sqrt(2 * math.pi) * np.exp((n - 1) * np.log(0.5 * (1 + _erf(z / math.sqrt(2)))))
    expected = np.trapezoid(np.exp(-sigma ** 2 / 2 + sigma * z) * density, z)
    assert expected_slowdown(Variability(jitter_sigma=sigma), n) == pytest.approx(expected, rel=1e-7)
    assert expected == pytest.approx(1.0405, abs=1e-4)


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf)(x)


def test_same_seed_same_draws():
    var = Variability(jitter_sigma=0.02, straggler_prob=0.001, straggler_slowdown=3.0)
    a = sample_step_factors(var, 1024, 1000, np.random.default_rng(7))
    b = sample_step_factors(var, 1024, 1000, np.random.default_rng(7))
    c = sample_step_factors(var, 1024, 1000, np.random.default_rng(8))
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_cdf_of_the_mixture():
    var = Variability(straggler_prob=0.25, straggler_slowdown=2.0)
    assert list(var.cdf(np.array([0.5, 1.0, 1.5, 2.0]))) == [0.0, 0.75, 0.75, 1.0]
    assert Variability().trivial and Variability(straggler_prob=0.5).trivial and not var.trivial


@pytest.mark.parametrize("kwargs, field", [
    ({"jitter_sigma": -0.1}, "variability.jitter_sigma"),
    ({"straggler_prob": 1.5}, "variability.straggler_prob"),
    ({"straggler_slowdown": 0.5}, "variability.straggler_slowdown"),
    ({"jitter_sigma": True}, "variability.jitter_sigma"),
])
def test_bad_variability(kwargs, field):
    with pytest.raises(SpecError) as err:
        Variability(**kwargs)
    assert err.value.fields == [field]


def test_bad_device_count():
    with pytest.raises(SpecError):
        expected_slowdown(Variability(jitter_sigma=0.1), 0)
