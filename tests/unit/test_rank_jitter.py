"""The wait for the slowest rank: the lockstep bench's rows, the σ they fit, and the cost both engines
charge for it. Every expected number is derived by hand from E[max(X1, X2)] = 2·Φ(σ/√2) for two
i.i.d. lognormals of mean 1."""

import math

import pytest

import simtrain as st
from simtrain.calibrate.bench_rank_jitter import BENCH, bench_rank_jitter, fit_rank_jitter, jitter_rows
from simtrain.calibrate.bench_rank_jitter import jitter_main as main
from simtrain.calibrate.measure import _groups
from simtrain.cost.compute import device_efficiency
from simtrain.cost.variability import Variability, expected_slowdown, sigma_for_slowdown, sync_wait_seconds
from simtrain.errors import SpecError


def _phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def _two_rank_wait(sigma: float) -> float:
    return 2.0 * _phi(sigma / math.sqrt(2.0)) - 1.0


def test_rows_hold_the_mean_of_every_time_and_of_each_rounds_slowest():
    # rounds (1, 3), (2, 2), (4, 2): every time 14 / 6; the slowest 3, 2, 4 → mean 3
    each, slowest = jitter_rows([[1.0, 3.0], [2.0, 2.0], [4.0, 2.0]], threads=1)
    assert (each.bench, each.params["of"], each.params["ranks"], each.repeats) == (BENCH, "each", 2, 6)
    assert each.median_s == pytest.approx(14 / 6)
    assert (slowest.params["of"], slowest.repeats) == ("slowest", 3)
    assert slowest.median_s == pytest.approx(3.0)
    assert each.p10_s <= each.median_s <= each.p90_s
    # the interval of the mean: ±1.96 · s / √n, s of (3, 2, 4) = 1
    assert slowest.ci_high_s - slowest.median_s == pytest.approx(1.96 / math.sqrt(3))


def test_fit_inverts_the_two_rank_closed_form():
    rows = jitter_rows([[1.0, 3.0], [2.0, 2.0], [4.0, 2.0]], threads=1)
    sigma = fit_rank_jitter(rows)["rank_jitter_sigma"]
    assert _two_rank_wait(sigma) == pytest.approx(3.0 / (14 / 6) - 1.0, rel=1e-9)


def test_fit_without_the_rows_or_without_a_wait():
    assert fit_rank_jitter([]) == {}
    assert fit_rank_jitter(jitter_rows([[2.0, 2.0], [3.0, 3.0]], threads=1)) == {"rank_jitter_sigma": 0.0}


@pytest.mark.parametrize("ranks", [2, 3, 8, 64])
@pytest.mark.parametrize("sigma", [0.02, 0.1, 0.4])
def test_sigma_for_slowdown_inverts_the_expected_maximum(ranks, sigma):
    ratio = expected_slowdown(Variability(jitter_sigma=sigma), ranks)
    assert sigma_for_slowdown(ratio, ranks) == pytest.approx(sigma, rel=1e-6)


def test_sigma_for_slowdown_refuses_one_rank():
    with pytest.raises(SpecError, match="ranks"):
        sigma_for_slowdown(1.1, 1)


def test_sync_wait_is_the_expected_maximum_less_one():
    assert sync_wait_seconds(2.0, 2, 0.1) == pytest.approx(2.0 * _two_rank_wait(0.1), rel=1e-9)
    assert sync_wait_seconds(2.0, 1, 0.1) == 0.0
    assert sync_wait_seconds(2.0, 8, 0.0) == 0.0
    # more ranks wait longer for their slowest
    assert sync_wait_seconds(1.0, 64, 0.1) > sync_wait_seconds(1.0, 8, 0.1) > sync_wait_seconds(1.0, 2, 0.1)


def _cluster(sigma: float):
    c = st.load_cluster("dgx-h100", nodes=1)
    dev = c.node.device
    eff = device_efficiency(dev).model_copy(update={"rank_jitter_sigma": sigma})
    node = c.node.model_copy(update={"device": dev.model_copy(update={"efficiency": eff})})
    return c.model_copy(update={"node": node})


_CFG = dict(global_batch_size=64, micro_batch_size=8, precision="bf16", optimizer="adamw")


def test_estimate_adds_the_wait_of_eight_ranks_to_the_exposed_sync():
    model = st.load_model("gpt2")
    with_j, without = st.estimate(model, _cluster(0.05), _CFG), st.estimate(model, _cluster(0.0), _CFG)
    assert without.sync_wait_s == 0.0
    b = with_j.time_breakdown_s
    work = b["compute"] + b["recompute"]  # one stage: the rank's own forward + backward
    expected = work * (expected_slowdown(Variability(jitter_sigma=0.05), 8) - 1.0)
    assert with_j.sync_wait_s == pytest.approx(expected, rel=1e-9)
    assert with_j.step_time_s - without.step_time_s == pytest.approx(expected, rel=1e-9)
    assert b["comm_exposed"] - without.time_breakdown_s["comm_exposed"] == pytest.approx(expected, rel=1e-9)
    assert with_j.to_dict()["sync_wait_s"] == with_j.sync_wait_s


def test_one_device_never_waits():
    dev = _cluster(0.3).node.device
    r = st.estimate("gpt2", st.Cluster.single(dev), dict(_CFG, global_batch_size=8))
    assert r.sync_wait_s == 0.0


def test_simulator_and_vector_search_charge_the_same_wait():
    from simtrain.search.vector import estimate_points
    model, cluster = st.load_model("gpt2"), _cluster(0.05)
    est = st.estimate(model, cluster, _CFG)
    assert st.simulate(model, cluster, _CFG).step_time_s == pytest.approx(est.step_time_s, rel=1e-9)
    rows = estimate_points(model, cluster, _CFG, [{"tp": 1}, {"tp": 2}], frame=False)
    assert rows["step_time_s"][0] == pytest.approx(est.step_time_s, rel=1e-12)
    assert rows["step_time_s"][1] == pytest.approx(st.estimate(model, cluster, dict(_CFG, tp=2)).step_time_s,
                                                   rel=1e-12)


def test_measure_keeps_rank_jitter_apart_from_the_compute_groups():
    groups, coll, jitter = _groups(["gemm", BENCH], collectives=True)
    assert (groups, coll, jitter) == (["gemm"], False, True)
    with pytest.raises(SpecError, match="unknown bench groups"):
        _groups(["jitter"], collectives=True)


def test_rank_main_refuses_bad_arguments(capsys):
    assert main([]) == 2 and main(["0"]) == 2 and main(["x"]) == 2
    assert "usage" in capsys.readouterr().err


def test_lockstep_ranks_on_this_machine():
    """Two real ranks of one thread, a few rounds: one row of each kind, and a round's slowest is never
    below the mean of its ranks, so the ratio is at least 1."""
    each, slowest = bench_rank_jitter(2, 1, rounds=4)
    assert (each.repeats, slowest.repeats) == (8, 4)
    assert slowest.median_s >= each.median_s > 0
    assert fit_rank_jitter([each, slowest])["rank_jitter_sigma"] >= 0.0


def test_the_communication_reason_names_the_wait():
    from types import SimpleNamespace

    from simtrain.report.explain import _exposed_parts
    from simtrain.report.step_report import CommReport
    report = SimpleNamespace(comm=(CommReport("dp", 0.004, 0.002, 1e6), CommReport("tp", 0.001, 0.0, 1e5)),
                             sync_wait_s=0.0015)
    assert _exposed_parts(report) == ["dp 2.0 ms", "1.5 ms waiting for the slowest rank"]
    assert _exposed_parts(SimpleNamespace(comm=report.comm, sync_wait_s=0.0)) == ["dp 2.0 ms"]


def test_a_rank_that_cannot_start_is_a_clear_error(monkeypatch):
    import simtrain.calibrate.bench_rank_jitter as bj
    from simtrain.errors import SimtrainError
    monkeypatch.setattr(bj, "JITTER_MODULE", "simtrain.no_such_module")
    with pytest.raises(SimtrainError, match="did not start"):
        bj.bench_rank_jitter(2, 1, rounds=2)
