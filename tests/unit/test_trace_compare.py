"""Op-by-op trace comparison without torch: a step's forward calls with their backward (sequence
numbers), per-position medians over steps, pairing with the model's ops class by class, the profiler's
cost taken out per unit, and predicted per-op costs that add up to the per-class prediction."""

from __future__ import annotations

import pytest

import simtrain as st
from simtrain.calibrate.trace import CallTime, TraceTimes, trace_times
from simtrain.calibrate.trace_fit import (
    OpComparison,
    compare_ops,
    ops_table,
    pair_calls,
    predicted_groups,
    predicted_ops,
    without_profiler_overhead,
)
from simtrain.errors import SpecError


def _x(name, ts, dur, seq=None, cat="cpu_op"):
    ev = {"ph": "X", "cat": cat, "name": name, "pid": 7, "tid": 1, "ts": ts, "dur": dur}
    return {**ev, "args": {"Sequence number": seq}} if seq is not None else ev


def _step(k, t0, conv_fw, extra=False):
    """A conv (seq 10k+1) → relu (seq 10k+2) step; backward: ReluBackward0, ConvolutionBackward0."""
    s = 10 * k
    evs = [_x(f"ProfilerStep#{k}", t0, 1000, cat="user_annotation"),
           _x("aten::conv2d", t0 + 10, conv_fw, s + 1), _x("aten::convolution", t0 + 11, conv_fw - 2, s + 1),
           _x("aten::relu", t0 + 200, 20, s + 2),
           _x("autograd::engine::evaluate_function: ReluBackward0", t0 + 300, 30, s + 2),
           _x("aten::threshold_backward", t0 + 301, 28),
           _x("autograd::engine::evaluate_function: ConvolutionBackward0", t0 + 400, 2 * conv_fw, s + 1),
           _x("aten::convolution_backward", t0 + 401, 2 * conv_fw - 2)]
    if extra:  # a data-dependent call in this step only: the step does not line up and is left out
        evs.append(_x("aten::relu", t0 + 900, 5, s + 3))
    return evs


def test_calls_are_forward_calls_with_their_backward_median_over_steps():
    doc = {"traceEvents": _step(0, 0, 100) + _step(1, 2000, 120) + _step(2, 4000, 140) + _step(3, 6000, 50, True)}
    t = trace_times(doc, "t.json")
    assert [c.root for c in t.calls] == ["aten::conv2d", "aten::relu"]
    conv, relu = t.calls
    assert conv.group == "conv" and relu.group == "elementwise"
    # steps 0–2 line up (median 120 µs forward, 240 backward); step 3 has an extra call: left out
    assert conv.fw_s == pytest.approx(120e-6) and conv.bw_s == pytest.approx(240e-6) and conv.bw_units == 1
    assert relu.fw_s == pytest.approx(20e-6) and relu.bw_s == pytest.approx(30e-6)


def test_profiler_cost_comes_off_each_call_per_unit():
    t = trace_times({"traceEvents": _step(0, 0, 100) + _step(1, 2000, 100) + _step(2, 4000, 100)}, "t.json")
    # 4 units per step (2 calls + 2 nodes); traced step 1000 µs, untraced 960: 10 µs per unit
    lean = without_profiler_overhead(t, 960e-6)
    conv = lean.calls[0]
    assert conv.fw_s == pytest.approx(90e-6) and conv.bw_s == pytest.approx(190e-6)
    relu = lean.calls[1]
    assert relu.fw_s == pytest.approx(10e-6) and relu.bw_s == pytest.approx(20e-6)


def test_pairing_is_by_class_in_order_and_keeps_the_unpaired():
    calls = [CallTime("aten::conv2d", "conv", 1e-3, 2e-3, 1), CallTime("aten::relu", "elementwise", 1e-4, 1e-4, 1),
             CallTime("aten::conv2d", "conv", 3e-3, 4e-3, 1), CallTime("aten::flatten", "memory", 1e-5, 0.0, 1)]
    ops = [("c1", "conv", 1e-3, 1.5e-3), ("r1", "elementwise", 2e-4, 2e-4), ("c2", "conv", 3e-3, 3e-3),
           ("head", "matmul", 1e-5, 2e-5)]
    rows = pair_calls(calls, ops)
    by_op = {r.op: r for r in rows}
    assert by_op["c1"].call == "aten::conv2d" and by_op["c1"].measured_fw_s == 1e-3
    assert by_op["c2"].measured_s == pytest.approx(7e-3) and by_op["c2"].predicted_s == pytest.approx(6e-3)
    assert by_op["c2"].gap_s == pytest.approx(1e-3)
    assert by_op["head"].call is None and by_op["head"].gap_s == pytest.approx(-3e-5)  # no call in the trace
    flatten = next(r for r in rows if r.call == "aten::flatten")
    assert flatten.op is None and flatten.predicted_s is None and flatten.gap_s == pytest.approx(1e-5)
    table = ops_table(rows, top=2)
    assert table.splitlines()[2].startswith("| c2 |") and table.splitlines()[3].startswith("| c1 |")
    assert "| head |" not in table and "All 5 rows" in table


def test_predicted_ops_add_up_to_the_class_prediction():
    """Two ways: Σ over the model's ops of the per-op cost (× micro-batches) = the per-class sums the
    trace fit uses (stage_compute over the model index, repeated blocks counted once × n)."""
    model = st.load_model("gpt2").with_seq_len(128)
    cluster = st.Cluster.single(st.load_device("host-cpu"))
    cfg = st.TrainConfig(global_batch_size=4, micro_batch_size=2, precision="fp32", optimizer="adamw")
    ops = predicted_ops(model, cluster, cfg)
    groups = predicted_groups(model, cluster, cfg)
    for cls in ("matmul", "attention", "norm"):
        assert sum(fw + bw for _, c, fw, bw in ops if c == cls) == pytest.approx(groups[cls], rel=1e-9)


def test_a_trace_without_calls_is_refused():
    t = TraceTimes(seconds={"matmul": 1e-3}, steps=1, step_s=None, units={}, source="t.json")
    with pytest.raises(SpecError, match="forward calls"):
        compare_ops(t, "mlp-mnist", "host-cpu", st.TrainConfig(global_batch_size=8, micro_batch_size=8))
    assert OpComparison("conv", None, None, None, None, None, None).gap_s == 0.0
