"""validation/components/gpu_check.py without a GPU: device mapping, plans, the profile predictions it
compares with (the same as model.py's), the error arithmetic and the JSON / Markdown report on synthetic
measurements, and the benchmark code paths on the CPU with a stand-in for CUDA events."""

from __future__ import annotations

import json
import math
import time

import pytest

import simtrain as st
from simtrain.cost.compute import device_efficiency
from validation.components import data, gpu_bench, gpu_check, model
from validation.components.gpu_check import Measurement

H200, H100, A100, A100_40 = "h200-sxm-141gb", "h100-sxm5-80gb", "a100-sxm4-80gb", "a100-sxm4-40gb"


@pytest.mark.parametrize(("name", "memory", "expected"), [
    ("NVIDIA H200", None, H200), ("NVIDIA H200 NVL", None, H200), ("NVIDIA H100 80GB HBM3", None, H100),
    ("NVIDIA H100 PCIe", None, H100), ("NVIDIA A100-SXM4-80GB", None, A100), ("NVIDIA A100-SXM4-40GB", None, A100_40),
    ("NVIDIA A100-PCIE-40GB", None, A100_40), ("NVIDIA A100 80GB PCIe", None, A100),
    ("NVIDIA A100", 40 * data.GIB, A100_40), ("NVIDIA A100", 80 * data.GIB, A100),
    ("NVIDIA GH200 480GB", None, None), ("NVIDIA L40S", None, None), ("Tesla V100-SXM2-32GB", None, None),
])
def test_device_for_gpu(name, memory, expected):
    assert gpu_check.device_for_gpu(name, memory) == expected


def test_slug_and_form_factor_note():
    assert gpu_check.gpu_slug("NVIDIA H200") == "nvidia-h200"
    assert gpu_check.gpu_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    assert gpu_check.form_factor_note("NVIDIA H100 PCIe") is not None
    assert gpu_check.form_factor_note("NVIDIA H200 NVL") is not None
    assert gpu_check.form_factor_note("NVIDIA H200") is None


def test_plan_covers_the_data_shapes_and_the_transformer_grid():
    full, quick = gpu_check.plan(H200), gpu_check.plan(H200, quick=True)
    bf16 = {(m, n, k) for d, m, n, k in full.gemm if d == "bf16"}
    # H200's GEMM data are H100's (derive.py): its MAMF best shape and square sweep are in the plan
    assert {(2048, 2048, 13312), (4096, 4096, 4096), (802816, 192, 768)} <= bf16
    assert {(m, n, k) for m in (2048, 4096, 8192) for n, k in gpu_check.TRANSFORMER_NK} <= bf16
    fp8 = {(m, n, k) for d, m, n, k in full.gemm if d == "fp8"}
    assert fp8 == {(p.m, p.n, p.k) for p in data.GEMM if p.device in (H200, H100) and p.dtype == "fp8"}
    assert len(full.gemm) == len(set(full.gemm))
    assert full.attention_seqs == (512, 1024, 2048, 4096, 8192, 16384)
    assert full.allreduce_sizes[0] == data.MIB and full.allreduce_sizes[-1] == data.GIB and len(full.allreduce_sizes) == 11
    assert set(quick.gemm) < set(full.gemm) and len(quick.attention_seqs) < len(full.attention_seqs)
    assert quick.trials < full.trials
    # no fp8 on A100 (no fp8 peak in the spec)
    assert {d for d, *_ in gpu_check.plan(A100).gemm} == {"bf16"}


def test_profile_values_are_model_py_predictions():
    eff = device_efficiency(st.load_device(H100))
    dev = model.device(H100)
    p = next(q for q in data.GEMM if q.device == H100 and (q.m, q.n, q.k, q.dtype) == (8192, 8192, 8192, "bf16"))
    got = gpu_check.profile_value("gemm-bf16", {"dtype": "bf16", "m": 8192, "n": 8192, "k": 8192}, H100)
    assert got == pytest.approx(model.gemm_tflops(p, dev, eff), rel=1e-12)
    a = next(q for q in data.ATTENTION if q.device == H100 and q.kernel == "sdpa" and q.seq == 16384)
    got = gpu_check.profile_value("attention-flash", {"kernel": "sdpa", "phase": "fw", "causal": False, "seq": 16384}, H100)
    assert got == pytest.approx(model.attention_tflops(a, dev, eff, eff.attention_kernels["sdpa"]), rel=1e-12)
    s = next(q for q in data.STREAM if q.device == H100 and q.kernel == "triad")
    got = gpu_check.profile_value("hbm", {"bytes_moved": 3 * data.BABELSTREAM_ARRAY_BYTES}, H100)
    assert got == pytest.approx(1e3 * model.stream_tbps(s, dev, eff), rel=1e-12)
    b = data.BusbwPoint(H100, "all_reduce", data.GIB, 0.0, "ring", "", "", "")
    got = gpu_check.profile_value("allreduce-ring", {"size_bytes": data.GIB, "world": 8}, H100)
    assert got == pytest.approx(model.busbw_gbps(b, H100, eff), rel=1e-12)
    # fewer GPUs: the dp group of that many on the same node; ring busbw barely depends on it
    two = gpu_check.profile_value("allreduce-ring", {"size_bytes": data.GIB, "world": 2}, H100)
    assert 0.9 < two / got < 1.1
    # A100 has no cuDNN attention family: nothing to compare with
    assert gpu_check.profile_value("attention-cudnn", {"kernel": "cudnn", "phase": "fw", "causal": False,
                                                       "seq": 4096}, A100) is None


def _synthetic(device_name: str, factor: float) -> list[Measurement]:
    """One point per component, measured = profile × ``factor``."""
    cases = [("gemm-bf16", "8192x8192x8192", {"dtype": "bf16", "m": 8192, "n": 8192, "k": 8192}, "TFLOP/s"),
             ("gemm-bf16", "4096x14336x4096", {"dtype": "bf16", "m": 4096, "n": 14336, "k": 4096}, "TFLOP/s"),
             ("attention-flash", "S4096 causal bw", {"backend": "flash", "kernel": "sdpa", "phase": "bw", "causal": True,
                                                     "seq": 4096}, "TFLOP/s"),
             ("attention-cudnn", "S4096 non-causal fw", {"backend": "cudnn", "kernel": "cudnn", "phase": "fw",
                                                         "causal": False, "seq": 4096}, "TFLOP/s"),
             ("hbm", "triad", {"kernel": "triad", "bytes_moved": 3 * data.BABELSTREAM_ARRAY_BYTES,
                               "babelstream": True}, "GB/s"),
             ("allreduce-ring", "1024 MiB x8", {"size_bytes": data.GIB, "world": 8}, "GB/s")]
    out = []
    for comp, label, params, unit in cases:
        prof = gpu_check.profile_value(comp, params, device_name)
        out.append(Measurement(comp, label, params, (prof or 100.0) * factor, 0.02, unit))
    return out


def test_error_arithmetic_and_summary():
    rows = gpu_check.compare(_synthetic(H100, 0.9), H100)
    for r in rows:
        assert r.error == pytest.approx(1 / 0.9 - 1)  # profile / measured - 1
    summary = gpu_check.summarize(rows)
    assert list(summary) == ["gemm-bf16", "attention-flash", "attention-cudnn", "hbm", "allreduce-ring"]
    assert summary["gemm-bf16"]["points"] == 2 and summary["gemm-bf16"]["compared"] == 2
    for s in summary.values():
        assert s["mape"] == pytest.approx(1 / 0.9 - 1)
        assert s["mean_error"] == pytest.approx(1 / 0.9 - 1) and s["worst_error"] == pytest.approx(1 / 0.9 - 1)
    # MAPE is the mean of |error|: +25 % and -20 % give 22.5 %
    over, under = gpu_check.compare(_synthetic(H100, 0.8)[:1], H100), gpu_check.compare(_synthetic(H100, 1.25)[:1], H100)
    s = gpu_check.summarize(over + under)["gemm-bf16"]
    assert s["mape"] == pytest.approx(0.225) and s["mean_error"] == pytest.approx(0.025)
    assert s["worst_error"] == pytest.approx(0.25)


def test_published_values():
    pub = {r.label: r.published for r in gpu_check.compare(_synthetic(H100, 1.0), H100)}
    assert pub["8192x8192x8192"] == 797.5  # [ZZC79] bf16 square sweep
    assert pub["4096x14336x4096"] is None
    assert pub["triad"] == pytest.approx(2970.0)
    assert pub["1024 MiB x8"] is None  # H100 ring rows are at 16 GiB only
    rows = gpu_check.compare([Measurement("allreduce-nccl", "x", {"size_bytes": data.GIB, "world": 8}, 1.0, 0.0,
                                          "GB/s")], H200)
    assert rows[0].published == 467.6  # [AZ-H200] NVLS sweep, 1 GiB


def test_report_files(tmp_path):
    meas = _synthetic(A100, 0.9)
    skipped = [{"component": "allreduce", "reason": "1 GPU visible: NCCL all-reduce needs >= 2"}]
    meta = {"gpu_name": "NVIDIA A100-SXM4-80GB", "gpu_count": 1, "torch": "2.x", "cuda": "12.x", "quick": True,
            "wall_s": 42.0, "date": "2025-01-01", "notes": ["a note"]}
    report = gpu_check.build_report(meta, meas, skipped, A100)
    paths = gpu_check.write_report(report, tmp_path / "out", "nvidia-a100-sxm4-80gb")
    assert paths["json"].name == "components-nvidia-a100-sxm4-80gb.json"
    back = json.loads(paths["json"].read_text())
    assert back["meta"]["device"] == A100 and back["skipped"] == skipped
    assert len(back["rows"]) == len(meas)
    cudnn = [r for r in back["rows"] if r["component"] == "attention-cudnn"]
    assert cudnn[0]["profile"] is None and cudnn[0]["error"] is None  # no cuDNN family in the A100 profile
    assert back["summary"]["attention-cudnn"] == {"points": 1, "compared": 0, "mape": None, "mean_error": None,
                                                  "worst_error": None}
    for r in back["rows"]:
        if r["profile"] is not None:
            assert r["error"] == pytest.approx(r["profile"] / r["measured"] - 1)
    md = paths["md"].read_text()
    assert "against the `a100-sxm4-80gb` profile" in md
    for comp in ("gemm-bf16", "attention-flash", "attention-cudnn", "hbm", "allreduce-ring"):
        assert f"## {comp}" in md
    assert "| gemm-bf16 | 2 | 2 | 11.1% | +11.1% | +11.1% |" in md
    assert "| 8192x8192x8192 |" in md and "+11.1%" in md
    assert "| attention-cudnn | 1 | 0 | — | — | — |" in md
    assert "- allreduce: 1 GPU visible" in md and "- a note" in md
    text = gpu_check.summary_text(report)
    assert "gemm-bf16" in text and "11.1%" in text and "skipped allreduce" in text


def test_spread():
    med, s = gpu_check.spread([1.0, 2.0, 4.0])
    assert med == 2.0 and s == pytest.approx(1.5)


def test_main_exits_3_without_cuda(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert gpu_check.main(["--out", str(tmp_path / "r"), "--quick"]) == 3
    assert not (tmp_path / "r").exists()
    assert "no GPU" in capsys.readouterr().err
    assert gpu_check.main(["--only", "gemm,tpu"]) == 2


class _Event:
    """CUDA-event stand-in on the host clock (ms, as torch.cuda.Event.elapsed_time)."""

    def __init__(self, enable_timing=True):
        self.t = 0.0

    def record(self):
        self.t = time.perf_counter()

    def synchronize(self):
        pass

    def elapsed_time(self, end):
        return max(end.t - self.t, 1e-6) * 1e3


def test_benchmark_code_paths_on_cpu(monkeypatch):
    """The measurement functions on the CPU at toy sizes: the torch calls they make exist and the
    records come out in the right units (timings here mean nothing)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("torch.nn.attention")
    monkeypatch.setattr(torch.cuda, "Event", _Event)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    monkeypatch.setattr(gpu_bench, "DEVICE", "cpu")
    monkeypatch.setattr(gpu_bench, "TRIAL_S", 1e-3)
    monkeypatch.setattr(gpu_bench, "WARM_UP_S", 0.0)
    monkeypatch.setattr(gpu_bench, "STREAM_ELEMENTS", 4096)
    monkeypatch.setattr(gpu_bench, "BIG_COPY_BYTES", 1 << 16)
    monkeypatch.setattr(model, "ATTENTION_TOKENS", 256)
    monkeypatch.setattr(model, "ATTENTION_WIDTH", 256)
    plan = gpu_check.Plan((("bf16", 64, 48, 32), ("fp8", 64, 48, 32)), (64, 128), (data.MIB,), 2)
    gemm, skip = gpu_bench.measure_gemm(plan)
    assert gemm[0].component == "gemm-bf16" and gemm[0].unit == "TFLOP/s" and gemm[0].measured > 0
    assert len(gemm) + len(skip) == 2  # fp8 measured or skipped cleanly, whatever this torch does on a CPU
    att, skip = gpu_bench.measure_attention(plan)
    flash = [m for m in att if m.component == "attention-flash"]
    assert [(m.params["seq"], m.params["causal"], m.params["phase"]) for m in flash] == [
        (s, c, p) for s in (64, 128) for c in (False, True) for p in ("fw", "bw")]
    assert flash[0].params["batch"] == 4 and flash[0].params["heads"] == 2
    assert all(m.measured > 0 and math.isfinite(m.measured) for m in att)
    hbm, _ = gpu_bench.measure_hbm(plan)
    assert [m.params["bytes_moved"] for m in hbm] == [2 * 4096 * 8, 3 * 4096 * 8, 4 * 4096 * 8, 2 << 16]
    ar, skip = gpu_bench.measure_allreduce(plan)
    assert ar == [] and skip[0]["component"] == "allreduce"
