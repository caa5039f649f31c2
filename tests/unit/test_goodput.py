"""Goodput over a long run: event logs of tiny hand-derived runs, the failure-free limit, the
Young/Daly closed forms, agreement with Daly's expected wall time, the interval scan, determinism,
inputs from a StepReport and a cluster, bad input, and the docs example kept in step with the code."""

import dataclasses
import importlib.util
import math
import re
import time
from pathlib import Path

import pytest

import simtrain as st
from simtrain.errors import SpecError
from simtrain.sim.goodput import plan_run, scan_checkpoint_intervals, simulate_run
from simtrain.sim.variability import Variability, expected_slowdown
from simtrain.sim.young_daly import checkpoint_bytes_of, daly_interval_s, daly_wall_s, young_interval_s
from tests.conftest import invented_cluster, linear_op

ROOT = Path(__file__).resolve().parents[2]

# tiny run: 1 s steps, 10 steps, a save (0.5 s) after every 4th step, restart 2 s + reload 0.5 s
TINY = dict(devices=1, steps=10, restart_s=2.0, checkpoint_s=0.5, checkpoint_interval_steps=4, record_events=True)


def _total(r) -> float:
    return r.useful_s + sum(r.lost_s.values())


def test_event_log_one_failure_after_a_checkpoint():
    r = simulate_run(1.0, failure_times_s=[6.0], **TINY)
    # steps 1-4 end at 4.0, save to 4.5; steps 5.. run from 4.5; the failure at 6.0 loses 1.5 s;
    # restart + reload 6.0 → 8.5; steps 5-8 → 12.5, save → 13.0; steps 9-10 → 15.0 (no save: 10 % 4 ≠ 0)
    assert r.log() == [("checkpoint", 4.5, 4), ("failure", 6.0, 4), ("restarted", 8.5, 4),
                       ("checkpoint", 13.0, 8), ("done", 15.0, 10)]
    assert r.wall_s == 15.0 and r.useful_s == 10.0
    assert dict(r.lost_s) == {"checkpoint": 1.0, "restart": 2.5, "recompute": 1.5, "straggler": 0.0}
    assert r.goodput == pytest.approx(10 / 15) and (r.failures_count, r.checkpoints_count) == (1, 2)


def test_event_log_failures_during_a_save_and_a_restart():
    r = simulate_run(1.0, failure_times_s=[7.0, 4.2, 6.0], **TINY)
    # 4.2 is inside the first save (4.0 → 4.5): not durable, 4.2 s lost; restarts 4.2 → 6.0 and
    # 6.0 → 7.0 are cut short (1.8 + 1.0 s), 7.0 → 9.5 completes; then 4 + 0.5 + 4 + 0.5 + 2 = 11 s
    assert r.log() == [("failure", 4.2, 0), ("failure", 6.0, 0), ("failure", 7.0, 0), ("restarted", 9.5, 0),
                       ("checkpoint", 14.0, 4), ("checkpoint", 18.5, 8), ("done", 20.5, 10)]
    assert r.lost_s["recompute"] == pytest.approx(4.2) and r.lost_s["restart"] == pytest.approx(1.8 + 1.0 + 2.5)
    assert r.failures_count == 3 and _total(r) == pytest.approx(r.wall_s, rel=1e-12)


def test_failure_free_goodput_is_step_over_step_plus_checkpoint_share():
    # M → ∞: wall = N·s + (N/K)·δ exactly, goodput = s / (s + δ/K) = 0.5 / (0.5 + 0.0625) = 8/9
    r = simulate_run(0.5, devices=8, steps=100, mtbf_device_s=math.inf, restart_s=60.0, checkpoint_s=0.25,
                     checkpoint_interval_steps=4)
    assert r.wall_s == 56.25 and r.goodput == 8 / 9 and r.failures_count == 0 and r.checkpoints_count == 25
    assert r.expected_wall_s == pytest.approx(56.25, rel=1e-12)


def test_young_and_daly_by_hand():
    # δ = 2 s, M = 400 s: Young sqrt(2·2·400) = 40; Daly: δ/2M = 1/400, sqrt = 0.05,
    # 40·(1 + 0.05/3 + 0.0025/9) − 2 = 40·1.0169444… − 2 = 38.677777…
    assert young_interval_s(2.0, 400.0) == 40.0
    assert daly_interval_s(2.0, 400.0) == pytest.approx(38.677777777777777, rel=1e-12)
    assert daly_interval_s(900.0, 400.0) == 400.0  # δ ≥ 2M: checkpoint every M
    assert daly_interval_s(2.0, math.inf) == math.inf
    # T_w = M·e^{R/M}·(e^{(τ+δ)/M} − 1)·T_s/τ with T_s 1000, τ 100, δ 10, R 50, M 1000:
    # 1000 · 1.0512711 · 0.1162781 · 10 = 1222.3977
    assert daly_wall_s(1000.0, 100.0, 10.0, 50.0, 1000.0) == pytest.approx(1222.397746157862, rel=1e-12)
    assert daly_wall_s(1000.0, 100.0, 10.0, 50.0, math.inf) == 1100.0


def test_simulated_wall_matches_daly_expectation():
    # exactly Daly's model (exponential failures, lost work since the last save, restarts that can
    # fail): the mean of 8 seeds is within 1 % of T_w (run-to-run spread ≈ 0.8 %, so ≈ 3.4 σ of the mean)
    runs = [simulate_run(1.0, devices=1, steps=200_000, mtbf_device_s=1000.0, restart_s=40.0, checkpoint_s=10.0,
                         checkpoint_interval_steps=100, seed=s) for s in range(8)]
    expected = daly_wall_s(200_000.0, 100.0, 10.0, 40.0 + 10.0, 1000.0)
    mean = sum(r.wall_s for r in runs) / len(runs)
    assert mean == pytest.approx(expected, rel=0.01)
    assert runs[0].expected_wall_s == pytest.approx(expected, rel=1e-12)
    for r in runs:
        assert _total(r) == pytest.approx(r.wall_s, rel=1e-9)
        assert r.failures_count == pytest.approx(r.wall_s / 1000.0, rel=0.25)


def test_job_mtbf_from_devices_and_nodes():
    plan = plan_run(1.0, devices=16, steps=10, mtbf_device_s=1600.0, restart_s=0.0, checkpoint_s=1.0)
    assert plan.job_mtbf_s == 100.0
    cluster = st.load_cluster("tpu-v4-pod", nodes=2)  # 2 hosts × 4 chips
    plan = plan_run(1.0, cluster, steps=10, mtbf_node_s=200.0, restart_s=0.0, checkpoint_s=1.0)
    assert (plan.devices, plan.job_mtbf_s) == (8, 100.0)


def test_checkpoint_time_from_cluster_storage():
    # tpu-v4-host: 25 GB/s network storage per host; 2 hosts write at once → 50 GB/s; 1e11 B → 2 s
    cluster = st.load_cluster("tpu-v4-pod", nodes=2)
    plan = plan_run(1.0, cluster, steps=10, restart_s=30.0, checkpoint_bytes=1e11)
    assert (plan.checkpoint_s, plan.reload_s, plan.recovery_s) == (2.0, 2.0, 32.0)
    plan = plan_run(1.0, cluster, steps=10, restart_s=30.0, checkpoint_bytes=1e11, storage_read_bytes_per_s=1e11)
    assert plan.reload_s == 1.0
    with pytest.raises(SpecError) as err:  # DGX H100 spec has no storage bandwidth: ask for it
        plan_run(1.0, st.load_cluster("dgx-h100", nodes=1), steps=10, restart_s=30.0, checkpoint_bytes=1e11)
    assert err.value.fields == ["simulate_run.storage_write_bytes_per_s"]


def test_checkpoint_bytes_per_parameter():
    model = st.Model("two", [linear_op("a/fc", "a", 4, 10, 10), linear_op("b/fc", "b", 4, 10, 10)])
    n = model.param_count
    # mixed-precision Adam: 2 (bf16 weights) + 4 (fp32 master) + 2 × 4 (m, v) = 14 B; fp32 SGD: 4 B
    assert checkpoint_bytes_of(model, st.TrainConfig(global_batch_size=1, precision="bf16", optimizer="adamw")) == 14 * n
    assert checkpoint_bytes_of(model, st.TrainConfig(global_batch_size=1, precision="fp32", optimizer="sgd")) == 4 * n


def test_inputs_from_a_step_report():
    model = st.Model("two", [linear_op("a/fc", "a", 4, 10, 10), linear_op("b/fc", "b", 4, 10, 10)])
    report = st.estimate(model, invented_cluster(2), st.TrainConfig(global_batch_size=8, precision="fp32",
                                                                    optimizer="sgd"))
    r = simulate_run(report, steps=3, restart_s=0.0, checkpoint_s=0.0, checkpoint_interval_steps=1)
    assert r.plan.base_step_s == report.step_time_s + report.eval_time_per_step_s
    assert r.plan.devices == 2 and r.plan.tokens_per_step == 8 * report.tokens_per_sample
    assert r.wall_s == pytest.approx(3 * r.plan.base_step_s, rel=1e-12)


def test_an_infeasible_step_is_refused():
    model = st.Model("two", [linear_op("a/fc", "a", 4, 10, 10), linear_op("b/fc", "b", 4, 10, 10)])
    report = st.estimate(model, invented_cluster(2), st.TrainConfig(global_batch_size=8, precision="fp32",
                                                                    optimizer="sgd"))
    bad = dataclasses.replace(report, feasible=False, reasons=("out of memory on rank 0",))
    with pytest.raises(SpecError, match="out of memory on rank 0") as err:
        simulate_run(bad, steps=3, restart_s=0.0, checkpoint_s=0.0)
    assert err.value.fields == ["simulate_run.step"]


def test_bad_scan_factors():
    with pytest.raises(SpecError) as err:
        scan_checkpoint_intervals(1.0, devices=1, steps=10, restart_s=1.0, checkpoint_s=1.0, factors=[1.0, -2.0])
    assert err.value.fields == ["simulate_run.factors"]


def test_stragglers_slow_the_run_by_the_expected_factor():
    var = Variability(jitter_sigma=0.02, straggler_prob=1e-3, straggler_slowdown=2.0)
    r = simulate_run(1.0, devices=256, steps=50_000, restart_s=0.0, checkpoint_s=0.0, checkpoint_interval_steps=10,
                     variability=var, seed=3)
    slow = expected_slowdown(var, 256)
    assert r.plan.expected_step_s == slow
    # a step is ≈ 2× when any of 256 devices straggles, q = 1 − 0.999^256 = 0.226: per-step std
    # ≈ sqrt(q(1−q)) = 0.42 s, so the excess over 50,000 steps has std 0.42·sqrt(50,000) = 94 s; allow 4σ
    assert r.lost_s["straggler"] == pytest.approx((slow - 1.0) * r.useful_s, abs=4 * 0.42 * math.sqrt(50_000))
    assert _total(r) == pytest.approx(r.wall_s, rel=1e-12)


def test_same_seed_same_result():
    kw = dict(devices=1024, steps=20_000, mtbf_device_s=1024 * 500.0, restart_s=30.0, checkpoint_s=5.0,
              variability=Variability(jitter_sigma=0.01), record_events=True)
    a, b, c = simulate_run(2.0, seed=11, **kw), simulate_run(2.0, seed=11, **kw), simulate_run(2.0, seed=12, **kw)
    assert a == b and a.events == b.events and a.wall_s == b.wall_s
    assert a.wall_s != c.wall_s


def test_interval_scan_finds_an_optimum_near_daly():
    kw = dict(devices=1, steps=100_000, mtbf_device_s=1000.0, restart_s=40.0, checkpoint_s=10.0)
    scan = scan_checkpoint_intervals(1.0, replicas=4, **kw)
    # Daly: δ/2M = 0.005, sqrt 0.0707; sqrt(2·10·1000) = 141.42 · (1 + 0.02357 + 0.00056) − 10 = 134.8 → 135 steps
    assert scan.daly_interval_steps == 135 and scan.young_interval_steps == 141
    assert {135, 141} <= set(scan.intervals_steps)
    assert scan.best_goodput == max(scan.goodput) and scan.best_goodput >= scan.daly_goodput
    assert 0.6 < scan.ratio < 1.6 and 0.6 < scan.fitted_interval_steps / 135 < 1.6
    assert "Daly" in scan.summary() and "simulated optimum" in scan.summary()


def test_default_interval_is_daly():
    r = simulate_run(1.0, devices=1, steps=1000, mtbf_device_s=1000.0, restart_s=40.0, checkpoint_s=10.0)
    assert r.checkpoint_interval_steps == 135


def test_a_54_day_16k_gpu_run_is_cheap():
    t0 = time.perf_counter()
    r = simulate_run(7.0, devices=16_384, tokens=15.6e12, tokens_per_step=2048 * 8192,
                     mtbf_device_s=54 * 86400 / 419 * 16_384, restart_s=600.0, checkpoint_s=2.84)
    assert time.perf_counter() - t0 < 1.0  # measured ≈ 0.015 s
    assert r.plan.steps == 929_833 and 500 < r.failures_count < 800


@pytest.mark.parametrize("kwargs, field", [
    ({"steps": 10, "tokens": 1e6}, "simulate_run.tokens"),
    ({"steps": 0}, "simulate_run.steps"),
    ({"steps": 10, "restart_s": -1.0}, "simulate_run.restart_s"),
    ({"steps": 10, "checkpoint_s": None}, "simulate_run.checkpoint_s"),
    ({"steps": 10, "checkpoint_interval_steps": 0}, "simulate_run.checkpoint_interval_steps"),
    ({"steps": 10, "mtbf_device_s": 100.0, "mtbf_node_s": 800.0}, "simulate_run.mtbf_device_s"),
    ({"steps": 10, "mtbf_device_s": 0.0}, "simulate_run.mtbf_device_s"),
    ({"tokens": 1e6}, "simulate_run.tokens_per_step"),
])
def test_bad_inputs(kwargs, field):
    kw = {"devices": 2, "restart_s": 1.0, "checkpoint_s": 1.0, **kwargs}
    with pytest.raises(SpecError) as err:
        simulate_run(1.0, **kw)
    assert err.value.fields == [field]


def test_front_door():
    assert st.simulate_run is simulate_run


def test_docs_example_matches_the_code():
    """docs/goodput.md shows the example's output; regenerate with
    ``python examples/goodput_16k.py --update-doc`` when the numbers change."""
    spec = importlib.util.spec_from_file_location("goodput_16k", ROOT / "examples" / "goodput_16k.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    doc = (ROOT / "docs" / "goodput.md").read_text()
    block = re.search(re.escape(example.BEGIN) + r"\n```text\n(.*?)\n```\n" + re.escape(example.END), doc, re.S)
    assert block is not None, "docs/goodput.md lost its generated block"
    assert block.group(1) == example.report_text(), "stale: run python examples/goodput_16k.py --update-doc"
