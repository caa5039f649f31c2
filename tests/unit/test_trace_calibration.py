"""Profiler-trace calibration without torch: hand-built Chrome traces → seconds per op class
(one mapping, top-level units only, steps), class factors applied to the efficiency profile
(hand-derived), per-class fits recovering known factors, files and bad input."""

from __future__ import annotations

import gzip
import json

import pytest

import simtrain as st
from simtrain.calibrate.runs import BOUNDS, check_factors, scaled_cluster
from simtrain.calibrate.trace import TraceTimes, op_class_of, read_profiler_trace, trace_times
from simtrain.calibrate.trace_fit import calibrate_classes, predicted_groups
from simtrain.cli import main
from simtrain.cost.compute import compute_seconds, device_efficiency
from simtrain.errors import SpecError
from simtrain.glossary import DType, OpClass
from simtrain.graph.aten import registered


def _x(name, ts, dur, cat="cpu_op", tid=1):
    return {"ph": "X", "cat": cat, "name": name, "pid": 7, "tid": tid, "ts": ts, "dur": dur}


def _step(k, t0):
    """One training step at t0 µs: linear (t + addmm), relu, an autograd node (mm, mm, sum), an
    unruled op, and the optimizer (its inner ops count as optimizer only)."""
    return [
        _x(f"ProfilerStep#{k}", t0, 1000, cat="user_annotation"),
        _x("aten::linear", t0 + 10, 100), _x("aten::t", t0 + 11, 5), _x("aten::addmm", t0 + 20, 80),
        _x("aten::copy_", t0 + 30, 10),  # inside addmm: never counted on its own
        _x("aten::relu", t0 + 120, 30),
        _x("autograd::engine::evaluate_function: AddmmBackward0", t0 + 200, 200),
        _x("AddmmBackward0", t0 + 201, 190), _x("aten::mm", t0 + 210, 60), _x("aten::mm", t0 + 280, 60),
        _x("aten::sum", t0 + 350, 20),
        _x("aten::my_custom_op", t0 + 420, 40),
        _x("Optimizer.step#SGD.step", t0 + 500, 300, cat="user_annotation"),
        _x("aten::add_", t0 + 510, 100), _x("aten::mul_", t0 + 620, 100),
    ]


def _trace(steps=2):
    events = [{"ph": "M", "name": "process_name", "pid": 7, "tid": 0},
              {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "x", "ts": 0,
               "dur": 1e6}]
    for k in range(steps):
        events += _step(k, 2000 * k)
    return {"schemaVersion": 1, "traceEvents": events}


def test_one_mapping_covers_every_registered_rule():
    classes = {name: op_class_of(name) for name in registered()}
    assert all(isinstance(c, OpClass) for c in classes.values())
    assert op_class_of("aten::addmm") is OpClass.MATMUL
    assert op_class_of("aten::convolution") is OpClass.CONV
    assert op_class_of("aten::convolution_backward") is OpClass.CONV
    assert op_class_of("aten::_scaled_dot_product_flash_attention_for_cpu") is OpClass.ATTENTION
    assert op_class_of("aten::native_layer_norm") is OpClass.NORM
    assert op_class_of("aten::add_") is OpClass.ELEMENTWISE  # in-place: the functional rule
    assert op_class_of("aten::copy_") is OpClass.MEMORY
    assert op_class_of("aten::linear") is None  # a composite: its children name it


def test_units_are_counted_once_by_their_highest_class():
    t = trace_times(_trace(2), "t.json")
    # per step: linear 100 µs (matmul via addmm), relu 30, AddmmBackward0 200 (mm beats sum),
    # custom op 40 unmapped, optimizer 300 (its add_/mul_ are not elementwise)
    assert t.steps == 2
    assert t.seconds == pytest.approx({"matmul": 300e-6, "elementwise": 30e-6, "unmapped": 40e-6,
                                       "optimizer": 300e-6})
    assert t.units == {"elementwise": 1, "matmul": 2, "optimizer": 1, "unmapped": 1}
    assert t.unmapped_names == ("aten::my_custom_op",)
    assert t.step_s == pytest.approx(1000e-6)
    assert t.gap_s == pytest.approx(1000e-6 - 670e-6)
    assert len(t.per_step) == 2 and t.per_step[0]["matmul"] == pytest.approx(300e-6)
    assert t.relative_spread("matmul") == pytest.approx(0.0)


def _seq(ev, n):
    return {**ev, "args": {"Sequence number": n}}


def test_backward_nodes_take_the_class_of_the_forward_call_that_made_them():
    """cross_entropy_loss = log_softmax (seq 5) + nll_loss (seq 6) is one reduction unit; its
    LogSoftmaxBackward0 (seq 5, an elementwise kernel on its own) is the reduction's too, as the importer
    prices a call's backward with the call. A no-grad op before a call records the number the call's
    node gets (arange, seq 7, then embedding, seq 7): the later op made the node."""
    events = [
        _x("ProfilerStep#0", 0, 2000, cat="user_annotation"),
        _seq(_x("aten::cross_entropy_loss", 10, 100), 5), _seq(_x("aten::log_softmax", 11, 40), 5),
        _seq(_x("aten::_log_softmax", 12, 38), 5),
        _seq(_x("aten::nll_loss", 60, 40), 6), _seq(_x("aten::nll_loss_forward", 61, 38), 6),
        _seq(_x("aten::arange", 120, 5), 7), _seq(_x("aten::embedding", 130, 20), 7),
        _seq(_x("autograd::engine::evaluate_function: NllLossBackward0", 200, 30), 6),
        _seq(_x("aten::nll_loss_backward", 201, 25), 6),
        _seq(_x("autograd::engine::evaluate_function: LogSoftmaxBackward0", 240, 50), 5),
        _seq(_x("aten::_log_softmax_backward_data", 241, 45), 5),
        _seq(_x("autograd::engine::evaluate_function: EmbeddingBackward0", 300, 60), 7),
        _x("aten::embedding_dense_backward", 301, 55),
        _seq(_x("autograd::engine::evaluate_function: ReluBackward0", 400, 10), 99),  # forward not traced
        _x("aten::threshold_backward", 401, 8),
    ]
    t = trace_times({"traceEvents": events}, "t.json")
    assert t.seconds == pytest.approx({"reduction": 180e-6, "memory": 5e-6, "embedding": 80e-6,
                                       "elementwise": 10e-6})
    assert t.units == {"reduction": 3, "memory": 1, "embedding": 2, "elementwise": 1}
    bad = [_seq(ev, True) if "LogSoftmaxBackward0" in ev["name"] else ev for ev in events]  # bool: ignored
    assert trace_times({"traceEvents": bad}, "t.json").seconds["elementwise"] == pytest.approx(60e-6)


def test_steps_from_optimizer_markers_and_explicit_steps():
    doc = _trace(3)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not e["name"].startswith("ProfilerStep")]
    t = trace_times(doc, "t.json")
    assert t.steps == 3 and t.seconds["matmul"] == pytest.approx(300e-6)
    assert trace_times(doc, "t.json", steps=3).steps == 3
    with pytest.raises(SpecError, match="holds 3 Optimizer.step markers, not 2"):
        trace_times(doc, "t.json", steps=2)
    bare = {"traceEvents": [e for e in doc["traceEvents"] if not e["name"].startswith("Optimizer")]}
    with pytest.raises(SpecError, match="steps=N"):
        trace_times(bare, "t.json")
    # without the annotation the optimizer's add_ / mul_ are plain elementwise ops
    assert trace_times(bare, "t.json", steps=3).seconds["elementwise"] == pytest.approx(230e-6)


@pytest.mark.parametrize("doc, field, reason", [
    ({"foo": 1}, "traceEvents", "not a profiler trace"),
    ({"traceEvents": [3]}, "traceEvents[0]", "JSON object"),
    ({"traceEvents": [{"ph": "X", "name": "aten::mm", "ts": 0, "dur": -1}]}, "traceEvents[0].dur", "≥ 0"),
    ({"traceEvents": [{"ph": "X", "name": "aten::mm", "ts": "0", "dur": 1}]}, "traceEvents[0].ts", "finite"),
    ({"traceEvents": [{"ph": "X", "name": 5, "ts": 0, "dur": 1}]}, "traceEvents[0].name", "string"),
    ({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "sgemm", "ts": 0, "dur": 1}]}, "traceEvents[0].cat", "GPU"),
    ({"traceEvents": [{"ph": "X", "name": "Foo", "ts": 0, "dur": 1}]}, "traceEvents", "no ATen ops"),
])
def test_bad_traces_name_the_field(doc, field, reason):
    with pytest.raises(SpecError, match=reason) as err:
        trace_times(doc, "bad.json", steps=1)
    assert err.value.issues[0].field == field and err.value.issues[0].file == "bad.json"


def test_files_plain_gzip_capped_and_broken(tmp_path):
    plain, gz = tmp_path / "a.json", tmp_path / "a.json.gz"
    plain.write_text(json.dumps(_trace(2)))
    gz.write_bytes(gzip.compress(json.dumps(_trace(2)).encode()))
    assert read_profiler_trace(plain).seconds == read_profiler_trace(gz).seconds
    with pytest.raises(SpecError, match="larger than 100 bytes"):
        read_profiler_trace(plain, max_bytes=100)
    (tmp_path / "b.json").write_text("{not json")
    with pytest.raises(SpecError, match="broken JSON"):
        read_profiler_trace(tmp_path / "b.json")
    (tmp_path / "c.json.gz").write_bytes(b"not gzip")
    with pytest.raises(SpecError, match="gzip"):
        read_profiler_trace(tmp_path / "c.json.gz")
    with pytest.raises(SpecError, match="not a regular file"):
        read_profiler_trace(tmp_path)


def test_run_record_from_a_trace_takes_its_median_step(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_trace(3)))
    cfg = st.TrainConfig(global_batch_size=64, micro_batch_size=64, precision="fp32")
    rec = st.RunRecord.from_profiler_trace(path, "mlp-mnist", "host-cpu", cfg)
    assert rec.step_time_s == pytest.approx(1000e-6) and rec.name == "t.json"
    doc = _trace(1)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not e["name"].startswith(("ProfilerStep", "Optimizer"))]
    path.write_text(json.dumps(doc))
    with pytest.raises(SpecError, match="no step markers"):
        st.RunRecord.from_profiler_trace(path, "mlp-mnist", "host-cpu", cfg, steps=1)


# --- factors ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def mlp():
    cluster = st.Cluster.single(st.load_device("host-cpu"))
    cfg = st.TrainConfig(global_batch_size=64, micro_batch_size=64, precision="fp32", optimizer="adam")
    return st.load_model("mlp-mnist"), cluster, cfg


def test_class_factor_scales_only_its_class_compute_ceiling(mlp):
    _, cluster, _ = mlp
    scaled = scaled_cluster(cluster, {"class:matmul": 0.5, "class:norm": 3.0})
    base, new = device_efficiency(cluster.device), device_efficiency(scaled.device)
    assert new.compute[OpClass.MATMUL].peak_fraction == pytest.approx(0.5 * base.compute[OpClass.MATMUL].peak_fraction)
    assert new.compute[OpClass.NORM].peak_fraction == min(1.0, 3.0 * base.compute[OpClass.NORM].peak_fraction)
    assert new.compute[OpClass.CONV] == base.compute[OpClass.CONV]
    assert new.memory_bandwidth_fraction == base.memory_bandwidth_fraction
    # the compute leg of a matmul: flops / (peak · pf · k · f / (f + half)) = t / k
    t0 = compute_seconds(5e7, OpClass.MATMUL, cluster.device, DType.FP32, base)
    assert compute_seconds(5e7, OpClass.MATMUL, scaled.device, DType.FP32, new) == pytest.approx(t0 / 0.5, rel=1e-12)


def test_class_factors_are_checked():
    check_factors({"class:matmul": 2.0, "memory": 1.0})
    assert BOUNDS["class:attention"] == (0.05, 4.0)
    with pytest.raises(SpecError, match="unknown factor"):
        check_factors({"class:bogus": 1.0})
    with pytest.raises(SpecError, match=r"\[0.05, 4.0\]"):
        check_factors({"class:conv": 5.0})


def test_predicted_groups_add_up_to_the_estimate(mlp):
    model, cluster, cfg = mlp
    g = predicted_groups(model, cluster, cfg)
    assert set(g) == {"matmul", "elementwise", "reduction", "optimizer", "other"}
    step = st.estimate(model, cluster, cfg).step_time_s
    assert sum(g.values()) == pytest.approx(step, rel=1e-9)
    assert g["optimizer"] == pytest.approx(st.estimate(model, cluster, cfg).time_breakdown_s["optimizer"])


def test_fit_recovers_known_class_factors(mlp, tmp_path):
    model, cluster, cfg = mlp
    truth = {"class:matmul": 0.6, "memory": 0.8}
    true = predicted_groups(model, scaled_cluster(cluster, truth), cfg)
    times = TraceTimes(seconds={k: v for k, v in true.items() if k != "other"}, steps=3, step_s=None,
                       units={}, source="synthetic")
    cal = calibrate_classes(times, model, cluster, cfg)
    fits = {c.group: c for c in cal.classes}
    for g in ("matmul", "optimizer"):
        assert fits[g].fitted and fits[g].fitted_s == pytest.approx(true[g], rel=0.02)
    assert not fits["elementwise"].fitted  # under 3 % of the step: keeps factor 1
    assert "class:elementwise" not in cal.factors
    assert cal.factors["class:matmul"] == pytest.approx(0.6, rel=0.05)
    assert cal.factors["memory"] == pytest.approx(0.8, rel=0.05)
    # the fitted factors are the calibration's: applying it reproduces the fitted class times
    assert predicted_groups(model, cal.apply(cluster), cfg)["matmul"] == pytest.approx(fits["matmul"].fitted_s)
    loaded = st.load_calibration(cal.to_yaml(tmp_path / "cal.yaml"))
    assert loaded == cal
    text = cal.summary()
    assert "class:matmul" in text and "optimizer" in text


def test_a_trace_of_another_model_is_refused(mlp):
    model, cluster, cfg = mlp
    times = TraceTimes(seconds={"conv": 1e-3}, steps=1, step_s=None, units={}, source="other.json")
    with pytest.raises(SpecError, match="enough of the trace"):
        calibrate_classes(times, model, cluster, cfg)


def test_cli_trace_errors_exit_2(tmp_path, capsys):
    bad = tmp_path / "t.json"
    bad.write_text("[]")
    assert main(["calibrate", "--trace", str(bad), "--model", "mlp-mnist", "--global-batch-size", "8"]) == 2
    assert "no ATen ops" in capsys.readouterr().err
    assert main(["calibrate", "--trace", str(bad), "--global-batch-size", "8"]) == 2
    assert "--model" in capsys.readouterr().err
    assert main(["calibrate", "--trace", str(bad), "--model", "mlp-mnist"]) == 2
    assert "--global-batch-size" in capsys.readouterr().err
