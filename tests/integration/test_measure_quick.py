"""A real (tiny) measurement run on this machine: sane rows, a 2-process gloo all-reduce, and a
calibration that runs on it. Only loose bounds that a slow, noisy 2-core machine always meets."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from simtrain.calibrate.fit import fit  # noqa: E402
from simtrain.calibrate.measure import measure  # noqa: E402
from simtrain.calibrate.records import Measurements  # noqa: E402
from simtrain.glossary import OpClass  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.slow]


@pytest.fixture(scope="module")
def tiny() -> Measurements:
    return measure("cpu", grid="tiny", threads=2)


def test_rows_are_sane(tiny):
    assert tiny.rows
    for r in tiny.rows:
        assert 0 < r.p10_s <= r.median_s <= r.p90_s < 60, r
        assert r.repeats >= 3
    benches = {r.bench for r in tiny.rows}
    assert {"gemm", "bmm", "conv2d", "sdpa", "add", "gelu", "layernorm", "batchnorm", "softmax",
            "embedding", "copy", "adamw_fused", "sgd_forloop", "all_reduce", "autograd_call"} <= benches
    assert {r.phase for r in tiny.select(bench="gemm")} == {"fw", "bw"}
    assert tiny.machine.threads == 2 and tiny.machine.cpu_cores >= 1 and tiny.machine.torch_version


def test_loose_rate_bounds(tiny):
    gemm = max(tiny.select(bench="gemm", phase="fw"), key=lambda r: r.flops)
    assert gemm.flops_per_s > 1e9  # a 512³ fp32 GEMM beats 1 GFLOP/s on any machine that runs CI
    copy = max(tiny.select(bench="copy"), key=lambda r: r.bytes_moved)
    assert copy.bytes_per_s > 0.5e9


def test_gloo_all_reduce_two_processes_two_sizes(tiny):
    rows = tiny.select(bench="all_reduce")
    assert sorted(r.params["message_bytes"] for r in rows) == [4096, 1 << 20]
    assert all(r.params["world_size"] == 2 and r.params["backend"] == "gloo" and r.op_class is None for r in rows)


def test_calibrate_runs_on_a_real_measurement(tiny, tmp_path):
    cal = fit(tiny)
    from simtrain.calibrate.machine import machine_slug
    assert cal.device.name.startswith(f"{machine_slug(tiny.machine)}-calibrated-")  # "Intel(R) Xeon" → intel-xeon
    groups = cal.mape_by_group()
    assert {"matmul", "conv", "attention", "elementwise", "norm", "memory", "collective:gloo:all_reduce"} <= set(groups)
    assert all(r.predicted_s > 0 for r in cal.residuals)
    assert cal.device.efficiency.curve(OpClass.MATMUL).peak_fraction <= 1.0
    from simtrain.calibrate.fit import load_profile
    assert load_profile(cal.save_profile(tmp_path / "p.yaml")) == cal.device


def test_cli_calibrate_from_saved_measurements(tiny, tmp_path, capsys):
    from simtrain.cli import main
    path = tiny.save(tmp_path / "m.json")
    # --allow-noisy: this checks the fit's output; whether the CI machine was quiet is not the point
    assert main(["calibrate", "--device", "cpu", "--measurements", str(path), "--out", str(tmp_path / "p.yaml"),
                 "--allow-noisy"]) == 0
    out = capsys.readouterr().out
    assert "(loaded)" in out and "MAPE" in out and (tmp_path / "p.yaml").exists()
