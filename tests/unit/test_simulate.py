"""The discrete-event engine: event logs of tiny pipelines, and agreement with the closed form."""

import json

import pytest

import simtrain as st
from tests.conftest import invented_cluster, linear_op

# one linear per block; on the invented device (1e12 FLOP/s fp32, 1e11 B/s, ideal efficiencies):
# k = n = 1000, m = 100 rows per sample, micro-batch 1: fw flops 2e8 → 200 us, bytes 100·1000·2·4
# + 1e6·4 = 4.8e6 B → 48 us; compute-bound: t_f = 200 us, t_agrad = t_wgrad = 200 us → t_b = 400 us
TF, TB = 200e-6, 400e-6


def _model(blocks: int) -> st.Model:
    return st.Model("pipe", [linear_op(f"layers.{i}/fc", f"layers.{i}", 100, 1000, 1000) for i in range(blocks)])


def _cfg(m: int, pp: int) -> st.TrainConfig:
    return st.TrainConfig(global_batch_size=m, micro_batch_size=1, precision="fp32", optimizer="sgd", pp=pp)


def test_event_log_two_stages_two_microbatches():
    s = st.simulate(_model(2), invented_cluster(2), _cfg(2, 2))
    log = sorted(((name, rank, round(t0 * 1e6, 3), round(t1 * 1e6, 3)) for name, rank, t0, t1 in s.timeline.log()
                  if not name.startswith(("send", "optimizer"))), key=lambda e: (e[2], e[1]))
    # backward-first, earliest micro-batch first; sends take ~0 on a 1 EB/s link
    assert log == [
        ("F mb0 c0", 0, 0.0, 200.0),
        ("F mb1 c0", 0, 200.0, 400.0),
        ("F mb0 c1", 1, 200.0, 400.0),
        ("B mb0 c1", 1, 400.0, 800.0),
        ("B mb0 c0", 0, 800.0, 1200.0),
        ("F mb1 c1", 1, 800.0, 1000.0),  # stage 1 had nothing ready but F mb1 once B mb0 left
        ("B mb1 c1", 1, 1000.0, 1400.0),
        ("B mb1 c0", 0, 1400.0, 1800.0),
    ]


@pytest.mark.parametrize("pp,m", [(1, 1), (1, 4), (2, 2), (2, 8), (4, 4), (4, 16)])
def test_simulate_equals_estimate_without_contention(pp, m):
    model, cluster, cfg = _model(4), invented_cluster(pp), _cfg(m, pp)
    e, s = st.estimate(model, cluster, cfg), st.simulate(model, cluster, cfg)
    assert s.engine == "simulate" and e.engine == "estimate"
    assert s.step_time_s == pytest.approx(e.step_time_s, rel=1e-6)
    assert s.memory == e.memory and s.model_flops_per_step == e.model_flops_per_step


def test_pipeline_makespan_is_m_plus_p_minus_1_steps():
    pp, m = 4, 6
    s = st.simulate(_model(4), invented_cluster(pp), _cfg(m, pp))
    last_backward = max(t1 for name, _, _, t1 in s.timeline.log() if name.startswith("B"))
    assert last_backward == pytest.approx((m + pp - 1) * (TF + TB), rel=1e-6)


def test_chrome_trace_is_well_formed(tmp_path):
    s = st.simulate(_model(2), invented_cluster(2), _cfg(2, 2))
    path = tmp_path / "trace.json"
    doc = s.timeline.to_chrome_trace(path)
    loaded = json.loads(path.read_text())
    assert loaded == doc and loaded["displayTimeUnit"] == "ms"
    xs = [e for e in loaded["traceEvents"] if e["ph"] == "X"]
    assert xs and all(e["dur"] >= 0 and "pid" in e and "tid" in e for e in xs)
    names = {(e["pid"], e["args"]["name"]) for e in loaded["traceEvents"] if e["name"] == "thread_name"}
    assert (0, "compute") in names
    # no two events overlap on one (pid, tid) track
    for key in {(e["pid"], e["tid"]) for e in xs}:
        track = sorted((e["ts"], e["ts"] + e["dur"]) for e in xs if (e["pid"], e["tid"]) == key)
        assert all(a[1] <= b[0] + 1e-6 for a, b in zip(track, track[1:], strict=False))


def test_infeasible_layout_is_a_report():
    s = st.simulate(_model(2), invented_cluster(2), _cfg(2, 4))
    assert not s.feasible and s.engine == "simulate"
