"""Properties of the discrete-event engine over random valid configurations (tests/property/strategies.py):

* simulate == estimate (≤ 1e-6 relative step time) when nothing contends — every schedule, per-layer
  granularity too, over tp / pp / dp / cp / ep / virtual stages / micro-batches / ZeRO / stacks;
* with shared links a step is never shorter than with private ones, and equals the estimate when
  no link ever carried two flows at once;
* a slower rank (speed factor < 1) never shortens a step; not recording the trace changes nothing.

Derandomised with few examples each (the engine runs several times per case), so CI stays fast.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

import simtrain as st
from tests.property.invariants import AGREE_REL
from tests.property.strategies import cases


def _settings(n: int):
    return settings(max_examples=n, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _steps(case, **kw) -> tuple[float, float]:
    e = st.estimate(case.model, case.cluster, case.cfg)
    s = st.simulate(case.model, case.cluster, case.cfg, **kw)
    return e.step_time_s, s.step_time_s


def _agree(a: float, b: float) -> bool:
    if not (math.isfinite(a) and math.isfinite(b)):
        return math.isfinite(a) == math.isfinite(b)
    return abs(a - b) <= AGREE_REL * a


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "dualpipev"])
def test_layer_granularity_equals_estimate_for_every_schedule(schedule):
    @_settings(12)
    @given(case=cases(schedule=schedule))
    def run(case):
        e, s = _steps(case, granularity="layer")
        assert _agree(e, s), (case, e, s)
    run()


@_settings(40)
@given(case=cases())
def test_shared_links_never_shorten_a_step_and_agree_when_uncontended(case):
    e, apart = _steps(case)
    shared = st.simulate(case.model, case.cluster, case.cfg, contention=True)
    if not math.isfinite(e):
        assert not math.isfinite(shared.step_time_s)
        return
    assert _agree(e, apart), (case, e, apart)
    assert shared.step_time_s >= apart * (1 - 1e-9), (case, apart, shared.step_time_s)
    if all(n <= 1 for n in shared.timeline.link_max_concurrent.values()):
        assert _agree(e, shared.step_time_s), (case, e, shared.step_time_s)


@_settings(15)
@given(case=cases(min_layers=2), slow=hs.floats(0.3, 1.0), which=hs.integers(0, 7))
def test_a_slower_rank_never_shortens_a_step(case, slow, which):
    base = st.simulate(case.model, case.cluster, case.cfg, trace=False)
    if not math.isfinite(base.step_time_s):
        return
    pp = case.cfg.pp
    speed = tuple(slow if r == which % pp else 1.0 for r in range(pp))
    slowed = st.simulate(case.model, case.cluster, case.cfg, speed=speed, trace=False)
    assert slowed.step_time_s >= base.step_time_s * (1 - 1e-12), (case, speed)
    traced = st.simulate(case.model, case.cluster, case.cfg)
    assert traced.step_time_s == base.step_time_s
