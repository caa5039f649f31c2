"""DDP over rounds (validation/rounds.py ``ddp_rounds``): each job's timings re-measured per round and
compared as medians; the per-round times kept on the cases."""

from dataclasses import dataclass

import pytest

pytest.importorskip("torch")

from validation import ddp, rounds  # noqa: E402
from validation.ddp import DdpTimes  # noqa: E402
from validation.report import Case  # noqa: E402
from validation.suite import _timing_of  # noqa: E402


def _t(k: float) -> DdpTimes:
    return DdpTimes(overlap_s=0.030 * k, no_overlap_s=0.040 * k, allreduce_s=0.010 * k, grad_bytes=4096,
                    per_rank_batch=8, alone_s=0.020 * k, concurrent_s=0.022 * k)


def test_median_times_is_fieldwise():
    m = rounds.median_times([_t(1.0), _t(3.0), _t(1.5)])
    assert (m.overlap_s, m.no_overlap_s, m.allreduce_s) == pytest.approx((0.045, 0.060, 0.015))
    assert (m.alone_s, m.concurrent_s, m.grad_bytes, m.per_rank_batch) == pytest.approx((0.030, 0.033, 4096, 8))


@dataclass(frozen=True)
class _Cfg:
    rounds: int = 3
    ddp_jobs: tuple = (("mlp", "small", 8), ("gpt", "small", 4))
    warmup: int = 1
    ddp_repeats: int = 2


def test_ddp_rounds_re_times_every_job_each_round(monkeypatch):
    calls = iter([[_t(2.0), _t(10.0)], [_t(1.2), _t(30.0)]])  # rounds 2 and 3, two jobs each
    monkeypatch.setattr(ddp, "measure_ddp", lambda jobs, warmup, repeats: next(calls))
    cal = object()  # its own passes are off: returned as it is
    merged, medians, per_job = rounds.ddp_rounds(_Cfg(), cal, [_t(1.0), _t(20.0)], lambda _m: None, passes=False)
    assert merged is cal
    assert [len(j) for j in per_job] == [3, 3]
    assert [t.overlap_s for t in per_job[1]] == pytest.approx([0.6, 0.3, 0.9])
    assert medians[0].overlap_s == pytest.approx(0.036) and medians[1].overlap_s == pytest.approx(0.6)


def test_each_ddp_case_keeps_the_timing_it_compares_with():
    t = _t(1.0)
    assert _timing_of(Case("mlp/small dp2 b8 overlap", "ddp_step", 1.0, 1.0), t) == 0.030
    assert _timing_of(Case("mlp/small dp2 b8 no_overlap", "ddp_step", 1.0, 1.0), t) == 0.040
    assert _timing_of(Case("mlp/small dp2 allreduce 0.0 MiB", "allreduce", 1.0, 1.0), t) == 0.010


def test_load_by_round_pairs_each_pass_with_its_steps():
    from validation.rounds import contention_markdown
    cases = [Case("a", "step_time", 0.010, 0.012, detail={"rounds_s": [0.010, 0.012, 0.014],
                                                          "rounds_steal": [0.0, 0.02, 0.10]}),
             Case("b", "step_time_unseen", 0.100, 0.110, detail={"rounds_s": [0.090, 0.110, 0.120],
                                                                 "rounds_steal": [0.0, 0.04, None]}),
             Case("a", "flops", 1.0, 1.0)]
    cal = {"passes_steal_fraction": [0.01, 0.0, 0.05], "passes_other_cpu_fraction": [0.2, 0.1, None]}
    lines = contention_markdown(cases, cal)
    # round 1: ratios 1.0 and 0.9 → median 0.95; round 2: 1.2, 1.1 → 1.15; round 3: 1.4, 1.2 → 1.3
    assert lines[-3] == "| 1 | 1.0 % | 20.0 % | 0.0 % (0.0 %–0.0 %) | 0.950 |"
    assert lines[-2] == "| 2 | 0.0 % | 10.0 % | 3.0 % (2.0 %–4.0 %) | 1.150 |"
    assert lines[-1] == "| 3 | 5.0 % | – | 10.0 % (10.0 %–10.0 %) | 1.300 |"
    assert contention_markdown(cases, None) == [] and contention_markdown(cases[2:], cal) == []


def test_round_spread_is_the_steps_own_movement_between_rounds():
    from validation.rounds import round_spread, spread_markdown
    cases = [Case("a", "step_time", 0.010, 0.012, detail={"rounds_s": [0.010, 0.012, 0.014]}),
             Case("b", "step_time_unseen", 0.100, 0.110, detail={"rounds_s": [0.090, 0.110, 0.120]}),
             Case("b", "step_time_plain_unseen", 0.100, 0.110, detail={"rounds_s": [0.5, 0.1]}),  # a duplicate view
             Case("c", "step_time", 0.010, 0.010, detail={"rounds_s": [0.010]})]  # one round: no spread
    s = round_spread(cases)
    # a: 14/10 − 1 = 0.4, consecutive 12/10 − 1 = 0.2 and 14/12 − 1 = 0.167 → 0.2
    # b: 120/90 − 1 = 0.333, consecutive 110/90 − 1 = 0.222 and 120/110 − 1 = 0.091 → 0.222
    assert s["models"] == 2 and s["rounds"] == 3
    assert s["spread_median"] == pytest.approx((0.4 + 1 / 3) / 2)
    assert (s["spread_min"], s["spread_max"]) == pytest.approx((1 / 3, 0.4))
    assert s["step_median"] == pytest.approx((0.2 + 2 / 9) / 2)
    assert "36.7 %" in spread_markdown(cases)[1] and "21.1 %" in spread_markdown(cases)[1]
    assert round_spread(cases[3:]) is None and spread_markdown(cases[3:]) == []


def test_modal_cases_compare_each_mode_with_the_rounds_timed_in_it(monkeypatch):
    """Rounds 10, 12.5, 13, 11, 12.8 ms with dispatch readings 3.7, 6.1, 6.3, (none), 6.2 µs against a
    threshold of 4.79 µs: the fast mode holds round 1 (10 ms), the slow mode rounds 2, 3, 5 (median
    12.8 ms), round 4 has no reading and is in neither. The mix profile is compared with the median over
    all rounds, as the headline case is. A FLOPs case and a case without a measured run give nothing."""
    from types import SimpleNamespace

    from simtrain.calibrate.modes import PlacementModes
    from validation import steps
    from validation.run_calibration import MeasuredRun
    modes = PlacementModes(3.7e-6, 6.2e-6, 4.79e-6, 2, 5)
    monkeypatch.setattr(rounds, "placement_modes", lambda rows: modes)
    monkeypatch.setattr(rounds, "_mode_devices", lambda merged, m: {"fast": "F", "slow": "S", "mix": "M"})
    monkeypatch.setattr(steps, "predict_step", lambda model, dev, batch, opt: SimpleNamespace(
        step_time_s={"F": 0.010, "S": 0.013, "M": 0.0112}[dev]))
    detail = {"rounds_s": [0.010, 0.0125, 0.013, 0.011, 0.0128], "rounds_dispatch_s": [3.7e-6, 6.1e-6, 6.3e-6, None, 6.2e-6]}
    cases = [Case("a", "step_time", 0.0115, 0.012, detail=detail), Case("a", "flops", 1.0, 1.0),
             Case("b", "step_time_unseen", 0.1, 0.1, detail=detail)]
    runs = [MeasuredRun("a", None, 8, "sgd", 0.012, False)]
    merged = SimpleNamespace(measurements=SimpleNamespace(rows=()))
    got = [(c.case, c.metric, c.predicted, c.measured) for c in rounds.modal_cases(merged, cases, runs, lambda _m: None)]
    assert [g[:2] for g in got] == [("a", "step_time_mix"), ("a fast mode", "step_time_modal"),
                                    ("a slow mode", "step_time_modal")]
    assert [g[2:] for g in got] == [pytest.approx((0.0112, 0.012)), pytest.approx((0.010, 0.010)),
                                    pytest.approx((0.013, 0.0128))]
    md = rounds.modes_markdown(rounds.modal_cases(merged, cases, runs, lambda _m: None))
    assert "| a | slow | 3 | 13.0 ms | 12.8 ms | +1.6 % |" in md
