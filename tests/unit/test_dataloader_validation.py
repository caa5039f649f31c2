"""validation/lab/dataloader_stalls.py's prediction and reporting logic on injected measurements
(no DataLoader runs here: hand-derived stalls for both engines, error arithmetic, the report)."""

from __future__ import annotations

import pytest

from validation.lab.dataloader_stalls import (
    Case,
    Measured,
    Row,
    grid,
    handoff_s,
    markdown,
    predict,
    summarise,
)


def _m(stall, compute=0.02, transform=0.0025, steps=10):
    return Measured(stall_s=stall, step_s=compute + stall, compute_s=compute, transform_per_sample_s=transform,
                    steps=steps)


def test_grid_is_the_issue_grid():
    cases = grid()
    assert len(cases) == 3 * (1 + 3 * 2)  # ratios × (no workers + workers {1, 2, 4} × prefetch {1, 2})
    assert {c.workers for c in cases} == {0, 1, 2, 4}
    assert all(c.prefetch_factor is None for c in cases if c.workers == 0)
    c = Case(2, 2, 4.0, 0.02, 4)
    assert c.transform_per_sample_s == pytest.approx(0.02) and c.warmup == 6


@pytest.mark.parametrize("workers, pf, per_sample, expected", [
    (0, None, 0.0025, 4 * 0.0025),            # no workers: the loop transforms the batch itself
    (1, 1, 0.0025, 0.0),                      # one worker, 10 ms per batch < 20 ms compute: hidden
    (1, 2, 0.02, 4 * 0.02 - 0.02),            # one worker, 80 ms per batch: 60 ms stall per step
    (2, 2, 0.02, 4 * 0.02 / 2 - 0.02),        # two workers share it: 20 ms
    (4, 1, 0.02, 0.0),                        # four: 20 ms per batch = compute, no stall
])
def test_both_engines_predict_the_hand_derived_stall(workers, pf, per_sample, expected):
    case = Case(workers, pf, 1.0, 0.02, 4)
    sim, closed = predict(case, _m(0.0, transform=per_sample, steps=12))
    assert closed == pytest.approx(expected, abs=1e-12)
    assert sim == pytest.approx(expected, abs=1e-9)  # steady state: the simulator equals the closed form


def test_errors_summary_and_report():
    c0, c1 = Case(0, None, 1.0, 0.02, 4), Case(1, 2, 0.25, 0.02, 4)
    rows = [Row(c0, _m(0.021), sim_stall_s=0.020, closed_stall_s=0.020),   # 1 ms under: step 41 ms
            Row(c1, _m(0.002), sim_stall_s=0.0, closed_stall_s=0.0)]       # 2 ms hand-off not modelled
    assert rows[0].error("sim") == pytest.approx(0.040 / 0.041 - 1)
    assert rows[1].stall_error_s("closed") == pytest.approx(-0.002)
    s = summarise(rows)
    mape = 100 * (abs(0.040 / 0.041 - 1) + abs(0.020 / 0.022 - 1)) / 2
    assert s["sim"]["mape_pct"] == pytest.approx(mape) and s["closed"]["mape_pct"] == pytest.approx(mape)
    assert s["sim"]["stall_max_ms"] == pytest.approx(2.0)
    assert handoff_s(rows) == {True: pytest.approx(0.002), False: pytest.approx(0.001)}
    assert s["closed+handoff"]["mape_pct"] == pytest.approx(0.0, abs=1e-9)  # in-sample: removes both
    text = markdown(rows, (0.5, 0.6))
    assert "| w0 pf- r1 |" in text and "| w1 pf2 r0.25 |" in text
    assert "simulator (simulate_data_loader)" in text and "closed form (pipeline_times)" in text
    assert "Warm-up excluded" in text and "load average 0.50 before" in text
