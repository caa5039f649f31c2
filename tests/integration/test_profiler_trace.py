"""A real torch.profiler trace of a few training steps of model A (an MLP) calibrates per-class factors,
which then apply to model B (a small conv net): the factors change B's predicted class times exactly
as hand-derived (compute leg ÷ factor), and the CLI writes the same kind of calibration. Only bounds
that a noisy, busy 2-core machine always meets: no timing accuracy is asserted here (that is the
validation report's job, validation/lab/trace_transfer.py)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import simtrain as st  # noqa: E402
from simtrain.calibrate.runs import BOUNDS, scaled_cluster  # noqa: E402
from simtrain.calibrate.trace import read_profiler_trace  # noqa: E402
from simtrain.calibrate.trace_fit import (  # noqa: E402
    calibrate_classes,
    compare_ops,  # noqa: E402
    predicted_groups,
)
from simtrain.cli import main  # noqa: E402
from simtrain.cost.compute import compute_seconds, device_efficiency  # noqa: E402
from simtrain.glossary import DType, OpClass  # noqa: E402

pytestmark = [pytest.mark.torch]

nn = torch.nn


def _profile(module, x, y, path, steps=3, loss=None):
    """Warm up, then profile ``steps`` training steps (SGD, momentum) into a Chrome trace."""
    from torch.profiler import ProfilerActivity, profile
    loss = loss or nn.CrossEntropyLoss()
    opt = torch.optim.SGD(module.parameters(), lr=1e-3, momentum=0.9)

    def step():
        opt.zero_grad()
        loss(module(x), y).backward()
        opt.step()
    for _ in range(2):
        step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    prof.export_chrome_trace(str(path))
    return path


@pytest.fixture(scope="module")
def cpu():
    return st.Cluster.single(st.load_device("host-cpu"))


@pytest.fixture(scope="module")
def traced_mlp(tmp_path_factory):
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    x, y = torch.randn(64, 784), torch.randint(0, 10, (64,))
    path = _profile(mlp, x, y, tmp_path_factory.mktemp("trace") / "mlp.json")
    return st.Model.from_torch(mlp, (x,)), path


def _convnet():
    torch.manual_seed(1)
    net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
                        nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(256, 10))
    return st.Model.from_torch(net, (torch.randn(16, 3, 32, 32),))


def _cfg(batch):
    return st.TrainConfig(global_batch_size=batch, micro_batch_size=batch, precision="fp32", optimizer="momentum")


def test_trace_of_a_training_step_has_the_models_classes(traced_mlp):
    _, path = traced_mlp
    t = read_profiler_trace(path)
    assert t.steps == 3  # one Optimizer.step# per step
    assert {"matmul", "elementwise", "optimizer"} <= set(t.seconds)
    # 3 linears forward, their 3 AddmmBackward0 nodes and the 3 TBackward0 nodes of the weights'
    # transposes (the linear's own, by sequence number); the loss's nodes are the reduction's
    assert t.units["matmul"] == pytest.approx(9)
    assert t.units["reduction"] == pytest.approx(3)
    assert 0 < t.attributed_s <= t.step_s  # units never overlap on one thread


def test_factors_fitted_on_a_apply_to_b_as_hand_derived(traced_mlp, cpu):
    model_a, path = traced_mlp
    cal = calibrate_classes(path, model_a, cpu, _cfg(64))
    assert "class:matmul" in cal.factors
    for name, k in cal.factors.items():
        assert BOUNDS[name][0] <= k <= BOUNDS[name][1]
    fits = {c.group: c for c in cal.classes}
    assert fits["matmul"].fitted and fits["matmul"].measured_s > 0
    applied = cal.apply(cpu)
    # B's matmul compute leg under the calibration: the class ceiling × k, so t / k (no clip here)
    k = cal.factors["class:matmul"]
    base_eff, new_eff = device_efficiency(cpu.device), device_efficiency(applied.device)
    if base_eff.compute[OpClass.MATMUL].peak_fraction * k < 1.0:
        t = compute_seconds(2.0 * 16 * 256 * 10, OpClass.MATMUL, cpu.device, DType.FP32, base_eff)
        assert compute_seconds(2.0 * 16 * 256 * 10, OpClass.MATMUL, applied.device, DType.FP32, new_eff) \
            == pytest.approx(t / k, rel=1e-12)
    # B's conv class had no time in A's trace: untouched; its whole prediction moves only through
    # the classes and the memory factor A fitted
    model_b = _convnet()
    before, after = predicted_groups(model_b, cpu, _cfg(16)), predicted_groups(model_b, applied, _cfg(16))
    only_matmul = predicted_groups(model_b, scaled_cluster(cpu, {"class:matmul": k}), _cfg(16))
    assert only_matmul["conv"] == pytest.approx(before["conv"], rel=1e-12)
    assert only_matmul["elementwise"] == pytest.approx(before["elementwise"], rel=1e-12)
    if abs(k - 1.0) > 0.01:  # a slower class (k < 1) is predicted slower on B too, and vice versa
        assert (only_matmul["matmul"] > before["matmul"]) == (k < 1.0)
    assert after == predicted_groups(model_b, scaled_cluster(cpu, cal.factors), _cfg(16))
    step_after = st.estimate(model_b, applied, _cfg(16)).step_time_s
    assert step_after == pytest.approx(sum(after.values()), rel=1e-9)


def test_each_linear_of_the_trace_pairs_with_the_models(traced_mlp, cpu):
    model, path = traced_mlp
    rows = compare_ops(path, model, cpu, _cfg(64))
    linears = [r for r in rows if r.group == "matmul"]
    assert [r.call for r in linears] == ["aten::linear"] * 3
    assert [r.op for r in linears] == [op.name for op in model.ops if op.op_class is OpClass.MATMUL]
    for r in linears:  # a real forward and a real backward (AddmmBackward0 + TBackward0) on both sides
        assert r.measured_fw_s > 0 and r.measured_bw_s > 0 and r.predicted_fw_s > 0 and r.predicted_bw_s > 0
    loss = next(r for r in rows if r.call == "aten::cross_entropy_loss")
    assert loss.group == "reduction" and loss.measured_bw_s > 0  # its backward nodes follow it


def test_cli_calibrates_from_the_trace(traced_mlp, tmp_path, capsys):
    _, path = traced_mlp
    out = tmp_path / "cal.yaml"
    # mlp-mnist in the library is the same 784-512-512-10 ReLU network
    rc = main(["calibrate", "--trace", str(path), "--model", "mlp-mnist", "--global-batch-size", "64",
               "--optimizer", "momentum", "--precision", "fp32", "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text
    cal = st.load_calibration(out)
    assert "class:matmul" in cal.factors and cal.classes
    assert "class:matmul" in text and "inside ops" in text
    assert main(["calibrate", "--trace", str(path), "--model", "mlp-mnist", "--global-batch-size", "64",
                 "--optimizer", "momentum", "--out", str(out), "--compare-ops", "4"]) == 0
    table = capsys.readouterr().out.split("| op | trace call |")[1]
    assert table.count("aten::linear") >= 1 and "All " in table
    assert main(["calibrate", "--trace", str(path), "--model", "mlp-mnist", "--global-batch-size", "64",
                 "--out", str(out), "--compare-ops", "0"]) == 2
    assert "--compare-ops" in capsys.readouterr().err
    assert main(["calibrate", "--trace", str(path), "--model", "mlp-mnist", "--global-batch-size", "64",
                 "--steps", "5", "--out", str(out)]) == 2
    assert "holds 3 Optimizer.step markers" in capsys.readouterr().err
