"""The published calibration set (Narayanan et al. 2021 Table 1, Korthikanti et al. 2022 Table 5) as
CI checks of transfer (issue "Predictions that transfer"; validation/published/transfer.py).

Zero-shot: the component-derived A100 profile and the ``megatron-lm`` stack, nothing fitted to the
tables. One-shot: ``st.calibrate_runs`` on one run of a table, every other run of that table predicted.
Table 1 runs with the settings of the authors' reproduction script (validation/published/cases.py).
Bounds below are the issue's targets, or guards at the numbers of record — never loosened to pass.
"""

import statistics

import pytest

from validation.published.transfer import (
    ONE_SHOT_MAPE,
    ONE_SHOT_MAX,
    extrapolate,
    korthikanti_records,
    megatron_records,
    one_shot,
    zero_shot,
)


@pytest.fixture(scope="module")
def t1():
    return megatron_records()


@pytest.fixture(scope="module")
def t5():
    return korthikanti_records()


def test_zero_shot_korthikanti_table5(t5):
    errs = zero_shot(t5)
    assert len(errs) == 8
    assert statistics.mean(abs(e) for e in errs) <= 0.03  # 1.8 % when written
    assert max(abs(e) for e in errs) <= 0.05               # 3.6 %


def test_zero_shot_narayanan_table1_guard(t1):
    """Not the issue's bar (that is one-shot); a guard on the honest zero-shot error. Every row is
    predicted faster than published (the 2020 code realises less of the component rates than the
    2022 code of Table 5), so the error is a bias, not scatter."""
    errs = zero_shot(t1)
    assert statistics.mean(abs(e) for e in errs) <= 0.10  # 9.3 % when written
    assert max(abs(e) for e in errs) <= 0.13               # 12.1 %
    assert all(e < 0 for e in errs)
    assert max(errs) - min(errs) <= 0.08                   # spread 6.5 points


def test_one_shot_korthikanti_every_choice_of_training_run_meets_the_target(t5):
    runs = one_shot(t5)
    missed = [(o.trained_on, round(100 * o.mape, 1), round(100 * o.worst, 1)) for o in runs if not o.meets_target]
    assert not missed, f"target: each ≤ {ONE_SHOT_MAX:.0%}, MAPE ≤ {ONE_SHOT_MAPE:.0%}; missed {missed}"


def test_one_shot_narayanan_every_choice_of_training_run_meets_the_target(t1):
    runs = one_shot(t1)
    missed = [(o.trained_on, round(100 * o.mape, 1), round(100 * o.worst, 1)) for o in runs if not o.meets_target]
    assert not missed, f"target: each ≤ {ONE_SHOT_MAX:.0%}, MAPE ≤ {ONE_SHOT_MAPE:.0%}; missed {missed}"
    assert all(0.5 < o.factor < 1.6 for o in runs)


def test_one_shot_table1_fails_with_the_guessed_settings():
    """The run settings carry the result: with one guess for every row (micro-batch 1, plain 1F1B,
    all-reduce after the backward) the same calibration misses for every choice of training run."""
    runs = one_shot(megatron_records(uniform_guess=True))
    assert sum(o.meets_target for o in runs) <= 2


def test_extrapolation_from_small_to_large_rows_guard(t1):
    cal, errs = extrapolate(t1)
    assert len(errs) == 5
    assert max(abs(e) for _, e in errs) <= ONE_SHOT_MAX                  # 4.0 % when written
    assert statistics.mean(abs(e) for _, e in errs) <= ONE_SHOT_MAPE    # 2.5 %


def test_selective_recompute_is_faster_than_full(t5):
    import simtrain as st
    times = [st.estimate(r.model, r.cluster, r.config).step_time_s for r in t5]
    for full, selective in zip(times[::2], times[1::2], strict=True):
        # the papers' ratio is 1.29 – 1.32; the model must land near it, not merely below
        assert 1.15 < full / selective < 1.45
