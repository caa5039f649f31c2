"""Calibration fit: recovers hand-chosen parameters from synthetic measurements made by the cost
layer's own op-time function (with noise); work counts by hand; profiles round-trip; hashes move."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

import simtrain.calibrate.bench_ops as counts
from simtrain.calibrate.fit import (
    calibrate,
    fit,
    fit_alpha_beta,
    fit_backend_link,
    load_profile,
    profile_key,
    profile_link,
)
from simtrain.calibrate.fit_compute import fit_compute
from simtrain.calibrate.machine import derived_cpu_peak_flops_per_s, machine_slug
from simtrain.calibrate.predict import predict_collective, predict_row
from simtrain.calibrate.records import MachineFacts, Measurements, Row
from simtrain.glossary import DType, OpClass
from simtrain.specs.efficiency import ComputeCurve
from simtrain.specs.hardware import Cluster, Efficiency
from tests.conftest import invented_device

# ------------------------------------------------------------------------------------------------
# work counts, by hand
# ------------------------------------------------------------------------------------------------


def test_gemm_counts_by_hand():
    # C[2,3] = A[2,4]·B[4,3]: 2·2·3·4 = 48 FLOPs; A 8 + B 12 + C 6 = 26 elements × 4 B = 104 B.
    assert counts.gemm_counts(2, 3, 4, 4) == (48.0, 104.0)
    # backward: dA and dB, 2 × 48 = 96 FLOPs; 2·(mn + kn + mk) = 2·(6 + 12 + 8) = 52 elements → 208 B.
    assert counts.gemm_counts(2, 3, 4, 4, backward=True) == (96.0, 208.0)


def test_conv_counts_by_hand():
    # N=1, C=2, 4×4 input, K=3 filters 3×3, stride 1, pad 1 → 4×4 output (P = (4 + 2 − 3)/1 + 1 = 4).
    # FLOPs = 2·N·K·P·Q·(C/G)·R·S = 2·1·3·16·2·9 = 1728. I = 32, W = 3·2·9 = 54, O = 48 → 134 el × 4 B.
    assert counts.conv2d_out_hw(4, 4, 3, 3, 1, 1) == (4, 4)
    assert counts.conv2d_counts(1, 2, 4, 4, 3, 3, 3, 1, 1, 1, 4) == (1728.0, 536.0)
    # depthwise (groups = C = 2, K = 2): 2·1·2·16·1·9 = 576 FLOPs; W = 2·1·9 = 18; I 32, O 32 → 82 el.
    assert counts.conv2d_counts(1, 2, 4, 4, 2, 3, 3, 1, 1, 2, 4) == (576.0, 328.0)


def test_attention_counts_by_hand():
    # B=1, H=2, S=4, D=8: QKᵀ and P·V are 2·4·4·8 = 256 each → 2·512 = 1024 FLOPs; Q, K, V, O
    # = 4 · 2 · 4 · 8 = 256 elements × 2 B (bf16) = 512 B. Causal keeps (4 + 1)/(2·4) = 5/8 → 640.
    assert counts.attention_counts(1, 2, 4, 4, 8, False, 2) == (1024.0, 512.0)
    assert counts.attention_counts(1, 2, 4, 4, 8, True, 2)[0] == pytest.approx(640.0)
    assert counts.attention_counts(1, 2, 4, 4, 8, False, 2, backward=True) == (2048.0, 1024.0)


def test_vector_counts_by_hand():
    assert counts.elementwise_counts("add", 10, 4) == (10.0, 120.0)   # read 2, write 1
    assert counts.elementwise_counts("gelu", 10, 2) == (50.0, 40.0)   # 5 FLOPs, read 1 write 1
    assert counts.norm_counts("layernorm", 12, 4, 4) == (96.0, 4 * (24 + 8))  # x, y + γ, β
    assert counts.softmax_counts(6, 4) == (30.0, 48.0)
    assert counts.embedding_counts(3, 5, 4) == (0.0, 3 * 8 + 2 * 3 * 5 * 4)
    # AdamW fused: 13 FLOPs/param (cost/optimizer.py), 7 passes × 4 B, one kernel per tensor on CPU and
    # one multi-tensor launch for ≤ 36 tensors on a GPU; for-loop 20 passes, 9 kernels per tensor
    assert counts.optimizer_counts("adamw", 100, 2, "fused") == (1300.0, 2800.0, 2)
    assert counts.optimizer_counts("adamw", 100, 2, "fused", "gpu") == (1300.0, 2800.0, 1)
    assert counts.optimizer_counts("adamw", 100, 2, "for-loop") == (1300.0, 8000.0, 18)


def test_cpu_peak_from_machine_facts_by_hand():
    # 2 cores × 8 fp32 lanes (AVX2) × 2 FMA pipes × 2 FLOPs × 2.0 GHz = 128 GFLOP/s
    facts = _facts("cpu", flags=("avx2", "fma", "sse2"), mhz=2000.0)
    assert derived_cpu_peak_flops_per_s(facts) == pytest.approx(128e9)
    assert derived_cpu_peak_flops_per_s(_facts("cpu", flags=("avx512f", "avx2", "fma"), mhz=1000.0)) == 128e9
    assert machine_slug(facts) == "amd-epyc-2c"
    xeon = _facts("cpu", model="Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz")
    assert machine_slug(xeon) == "intel-xeon-platinum-8375c-2c"


# ------------------------------------------------------------------------------------------------
# synthetic measurements
# ------------------------------------------------------------------------------------------------
TRUTH = {"matmul": (0.7, 5e7), "conv": (0.5, 1e8), "elementwise": (0.02, 2e5), "norm": (0.05, 1e6)}
# every half_flops costs a small op more than the launch overhead (h / (peak · fraction) ≥ 10 µs), so
# the rows identify it
TRUE_GLOBALS = {"memory_bandwidth_fraction": 0.7, "memory_half_bytes": 2e5, "launch_overhead_s": 4e-6}


def _facts(device="cuda", flags=("avx2", "fma"), mhz=2000.0, model="AMD EPYC") -> MachineFacts:
    return MachineFacts(cpu_model=model, cpu_cores=2, cpu_flags=tuple(flags), cpu_mhz=mhz,
                        torch_version="test", threads=2, device=device, date="2000-01-01")


def _truth_eff() -> Efficiency:
    compute = {c.value: {"peak_fraction": 0.3, "half_flops": 0.0} for c in OpClass}
    compute.update({k: {"peak_fraction": p, "half_flops": h} for k, (p, h) in TRUTH.items()})
    return Efficiency.model_validate({"compute": compute, **TRUE_GLOBALS})


def _row(bench, op_class, work, phase="fw", calls=1, **params) -> Row:
    return Row(bench, op_class, DType.FP32, params, work[0], work[1], 1.0, 1.0, 1.0, 5, phase, calls)


def _shapes() -> list[Row]:
    rows = []
    for n in (32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 333, 1000):
        rows.append(_row("gemm", OpClass.MATMUL, counts.gemm_counts(n, n, n, 4), m=n, n=n, k=n))
        rows.append(_row("gemm", OpClass.MATMUL, counts.gemm_counts(n, n, n, 4, backward=True), "bw", 2,
                         m=n, n=n, k=n))
    for n, c, hw in ((8, 64, 28), (32, 128, 14), (2, 16, 8), (64, 256, 14), (1, 8, 8)):
        geom = dict(n=n, c=c, h=hw, w=hw, k=c, r=3, s=3, stride=1, pad=1, groups=1, p=hw, q=hw)
        rows.append(_row("conv2d", OpClass.CONV, counts.conv2d_counts(n, c, hw, hw, c, 3, 3, 1, 1, 1, 4), **geom))
    for numel in (1 << 10, 1 << 13, 1 << 16, 1 << 19, 1 << 22, 1 << 25):
        for op in ("add", "gelu"):
            rows.append(_row(op, OpClass.ELEMENTWISE, counts.elementwise_counts(op, numel, 4), numel=numel))
        rows.append(_row("copy", OpClass.MEMORY, counts.copy_counts(numel, 4), numel=numel))
        rows.append(_row("layernorm", OpClass.NORM, counts.norm_counts("layernorm", numel, 256, 4), numel=numel))
    for tensors, impl in ((64, "fused"), (64, "for-loop"), (8, "for-loop")):
        f, b, k = counts.optimizer_counts("adamw", tensors * 65536, tensors, impl)
        rows.append(_row("adamw", OpClass.ELEMENTWISE, (f, b), "optim", k, tensors=tensors, optimizer="adamw",
                         impl=impl))
    return rows


def _optimizer_grid() -> list[Row]:
    """The optimizer rows of the full grid (bench_ops.py): 32 × 2¹⁵, 8 × 2¹⁹ and 256 × 1024 parameters, for-loop
    and fused AdamW; with the shapes' other rows instead of their three optimizer rows."""
    rows = [r for r in _shapes() if r.phase != "optim"]
    for tensors, numel in ((32, 1 << 15), (8, 1 << 19), (256, 1024)):
        for impl in ("for-loop", "fused"):
            f, b, k = counts.optimizer_counts("adamw", tensors * numel, tensors, impl)
            rows.append(_row("adamw", OpClass.ELEMENTWISE, (f, b), "optim", k, tensors=tensors, optimizer="adamw",
                             impl=impl))
    return rows


def _synthetic(device, eff, sigma=0.02, seed=0, bump=1.0, shapes=None) -> Measurements:
    """Times from predict_row (the cost layer itself) × lognormal noise; ``bump`` scales one row."""
    rng = np.random.default_rng(seed)
    rows = []
    for i, r in enumerate(shapes or _shapes()):
        t = predict_row(r, device, eff) * math.exp(sigma * rng.standard_normal()) * (bump if i == 0 else 1.0)
        rows.append(Row(r.bench, r.op_class, r.dtype, r.params, r.flops, r.bytes_moved, t, t * 0.98, t * 1.02,
                        5, r.phase, r.calls))
    return Measurements(tuple(rows), _facts())


def _start_eff() -> Efficiency:
    """A start far from the truth: every class at 0.5 of peak, no size effects, no overhead."""
    return Efficiency.model_validate({"compute": {c.value: {"peak_fraction": 0.5, "half_flops": 0.0} for c in OpClass},
                                      "memory_bandwidth_fraction": 0.5, "launch_overhead_s": 1e-7})


def test_fit_recovers_hand_chosen_parameters_from_noisy_synthetic_rows():
    dev = invented_device()  # 1 TFLOP/s fp32 (= vector rate), 100 GB/s, no matrix-unit geometry
    m = _synthetic(dev, _truth_eff())
    got = fit_compute(m.rows, dev, _start_eff()).efficiency
    for cls, (pf, half) in TRUTH.items():
        curve = got.curve(OpClass(cls))
        assert curve.peak_fraction == pytest.approx(pf, rel=0.05), cls
        assert curve.half_flops == pytest.approx(half, rel=0.35), cls
    assert got.memory_bandwidth_fraction == pytest.approx(0.7, rel=0.05)
    assert got.memory_half_bytes == pytest.approx(2e5, rel=0.35)
    assert got.launch_overhead_s == pytest.approx(4e-6, rel=0.25)


def test_fit_recovers_each_optimizers_per_tensor_overhead():
    """Hand-chosen host overheads per tensor (for-loop AdamW 30 µs, fused 8 µs) on top of the memory
    traffic and launches: the fit finds them from the optimizer rows, and a row's prediction is
    exactly memory + kernels × launch + tensors × overhead (predict_row's rule)."""
    from simtrain.calibrate.predict import predict_row
    from simtrain.cost.compute import memory_seconds
    dev = invented_device()
    truth = _truth_eff().model_copy(update={"optimizer_tensor_overhead_s": {"adamw/for-loop": 3e-5,
                                                                            "adamw/fused": 8e-6}})
    row = next(r for r in _optimizer_grid() if r.phase == "optim" and r.params["impl"] == "for-loop")
    expected = memory_seconds(row.bytes_moved, dev, truth) + row.calls * 4e-6 + 32 * 3e-5
    assert predict_row(row, dev, truth) == pytest.approx(expected)
    # started from the truth without the overheads: this synthetic grid barely tells the launch
    # overhead from memory_half_bytes (its small rows pay both), so a start far off can trade the
    # overheads for a higher launch cost; the real grid's many tiny rows pin the launch
    start = truth.model_copy(update={"optimizer_tensor_overhead_s": {}})
    got = fit_compute(_synthetic(dev, truth, shapes=_optimizer_grid()).rows, dev, start).efficiency
    assert got.optimizer_tensor_overhead_s["adamw/for-loop"] == pytest.approx(3e-5, rel=0.25)
    assert got.optimizer_tensor_overhead_s["adamw/fused"] == pytest.approx(8e-6, rel=0.5)
    assert got.launch_overhead_s == pytest.approx(4e-6, rel=0.25)  # the launches are not what moved


def test_fit_tells_an_optimizers_cost_per_step_from_its_cost_per_tensor():
    """Fused AdamW with 8 µs per tensor and 40 µs per step (``optimizer.step()``'s own Python): rows
    over 4, 8, 32 and 256 tensors separate the two, and a row's prediction adds the step's cost once."""
    from simtrain.calibrate.fit_compute import _optim_names
    from simtrain.calibrate.predict import predict_row
    from simtrain.cost.compute import memory_seconds
    dev = invented_device()
    truth = _truth_eff().model_copy(update={"optimizer_tensor_overhead_s": {"adamw/fused": 8e-6},
                                            "optimizer_step_overhead_s": {"adamw/fused": 4e-5}})
    rows = [r for r in _shapes() if r.phase != "optim"]
    for tensors, numel in ((32, 1 << 15), (8, 1 << 19), (256, 1024), (4, 1024)):
        f, b, k = counts.optimizer_counts("adamw", tensors * numel, tensors, "fused")
        rows.append(_row("adamw", OpClass.ELEMENTWISE, (f, b), "optim", k, tensors=tensors, optimizer="adamw",
                         impl="fused"))
    row = rows[-1]
    assert predict_row(row, dev, truth) == pytest.approx(memory_seconds(row.bytes_moved, dev, truth)
                                                         + row.calls * 4e-6 + 4 * 8e-6 + 4e-5)
    assert _optim_names(rows) == ["optim:adamw/fused", "optim_step:adamw/fused"]
    assert _optim_names(rows[:-2]) == ["optim:adamw/fused"]  # two tensor counts cannot separate them
    start = truth.model_copy(update={"optimizer_tensor_overhead_s": {}, "optimizer_step_overhead_s": {}})
    got = fit_compute(_synthetic(dev, truth, shapes=rows).rows, dev, start).efficiency
    assert got.optimizer_tensor_overhead_s["adamw/fused"] == pytest.approx(8e-6, rel=0.3)
    assert got.optimizer_step_overhead_s["adamw/fused"] == pytest.approx(4e-5, rel=0.3)


def test_calibrate_keeps_datasheet_peaks_and_names_the_device():
    dev = invented_device(efficiency=_start_eff().model_dump())
    # CUDA measurements: back-to-back calls overlap issue and kernel, as the fit then prices them
    m = _synthetic(dev, _truth_eff().model_copy(update={"launch_async": True}), sigma=0.0)
    cal = fit(m, dev)
    assert cal.device.efficiency.launch_async
    assert cal.device.name == f"invented-calibrated-{cal.key[:8]}"
    assert cal.device.peak_flops_per_s == dev.peak_flops_per_s
    # noise-free rows from the model itself fit closely; not exactly, as where every row of a class runs
    # longer on the device than its issue takes (this set's convolutions), that issue time has no
    # gradient but through the smooth max, and the fit stops on the flat (3.9 % here; serial: < 2 %)
    assert cal.mape_by_group()["all"] < 5.0
    assert calibrate(m, dev) == cal.device  # deterministic
    assert Cluster.single(cal.device).device == cal.device


def test_cpu_base_gets_first_principles_peak_and_only_measured_dtypes():
    cpu = invented_device(kind="cpu", efficiency=_start_eff().model_dump())
    m = _synthetic(cpu, _truth_eff())
    m = Measurements(m.rows, _facts("cpu", mhz=2000.0))
    d = fit(m, cpu).device
    # best GEMM (8192³ at 0.7 TFLOP/s) beats 128 GFLOP/s from the facts → the peak is the best rate
    best = max((r for r in m.rows if r.bench == "gemm" and r.phase == "fw"), key=lambda r: r.flops_per_s)
    assert set(d.peak_flops_per_s) == {DType.FP32}
    assert d.peak(DType.FP32) == pytest.approx(best.flops_per_s)
    assert d.peak_flops_per_s[DType.FP32].mark.value == "D"
    assert d.vector_flops_per_s is None
    assert d.efficiency.fixed_cost_unramped  # a new fit keeps the fixed cost outside the ramps


def test_a_convolution_faster_than_every_gemm_sets_the_cpu_peak():
    """A CPU's cpuinfo clock can be its base clock while the cores boost (a VM): a dense conv row timed
    above both the derived peak and the best GEMM bounds the peak from below (the source names it)."""
    cpu = invented_device(kind="cpu", efficiency=_start_eff().model_dump())
    m = _synthetic(cpu, _truth_eff())
    best_gemm = max((r for r in m.rows if r.bench == "gemm" and r.phase == "fw"), key=lambda r: r.flops_per_s)
    conv = max((r for r in m.rows if r.bench == "conv2d" and r.phase == "fw"), key=lambda r: r.flops)
    t = conv.flops / (1.5 * best_gemm.flops_per_s)  # the conv runs at 1.5× the best GEMM's rate
    fast = replace(conv, median_s=t, p10_s=t * 0.98, p90_s=t * 1.02)
    rows = tuple(fast if r is conv else r for r in m.rows)
    d = fit(Measurements(rows, _facts("cpu", mhz=2000.0)), cpu).device
    assert d.peak(DType.FP32) == pytest.approx(1.5 * best_gemm.flops_per_s)
    assert "conv2d" in d.peak_flops_per_s[DType.FP32].source


def test_profile_round_trips_and_works_as_a_device_spec(tmp_path):
    from simtrain.specs.hardware import Node
    from simtrain.specs.library import load_device
    dev = invented_device(efficiency=_start_eff().model_dump())
    cal = fit(_synthetic(dev, _truth_eff()), dev)
    path = cal.save_profile(tmp_path / "profile.yaml")
    assert load_profile(path) == cal.device
    assert load_device(path) == cal.device
    node = Node.model_validate({"name": "n", "device": str(path), "devices_count": 1, "fabric": {"topology": "none"},
                                "host": {"cpu_cores": {"value": 2, "source": "test"},
                                         "dram_bandwidth_bytes_per_s": {"value": 1e10, "source": "test"}}})
    assert node.device == cal.device


def test_a_plain_device_is_not_a_profile(tmp_path):
    from simtrain.errors import SpecError
    path = tmp_path / "dev.yaml"
    import yaml
    path.write_text(yaml.safe_dump({"spec": "device", **invented_device().model_dump(mode="json", exclude_none=True)}))
    with pytest.raises(SpecError, match="not a calibration profile"):
        load_profile(path)


def test_hash_and_key_change_when_measurements_or_base_change():
    dev = invented_device()
    m1, m2 = _synthetic(dev, _truth_eff()), _synthetic(dev, _truth_eff(), bump=1.01)
    assert m1.hash == _synthetic(dev, _truth_eff()).hash  # same numbers, same hash
    assert m1.hash != m2.hash
    assert profile_key(m1, dev) != profile_key(m2, dev)
    assert profile_key(m1, dev) != profile_key(m1, invented_device(name="other"))


def test_measurements_json_round_trip(tmp_path):
    m = _synthetic(invented_device(), _truth_eff())
    path = m.save(tmp_path / "m.json")
    back = Measurements.load(path)
    assert back.rows == m.rows and back.machine == m.machine and back.hash == m.hash


# ------------------------------------------------------------------------------------------------
# communication
# ------------------------------------------------------------------------------------------------
def test_alpha_beta_recovers_latency_and_bandwidth():
    # t = 50 µs + S / 2 GB/s, exactly
    sizes = [2.0 ** p for p in range(8, 26, 2)]
    ab = fit_alpha_beta(sizes, [50e-6 + s / 2e9 for s in sizes])
    assert ab.alpha_s == pytest.approx(50e-6, rel=0.02)
    assert ab.bytes_per_s == pytest.approx(2e9, rel=0.02)


def test_collective_link_fit_recovers_bandwidth_step_and_base_latency():
    """Rows made by collective_time (through predict_collective) at known B, α, base; fit recovers them."""
    eff = invented_device().efficiency
    truth = eff.model_copy(update={"extra": {"collective_base_latency_s": 30e-6, "collective_step_overhead_s": 0.0}})
    rows = []
    for world in (2, 4):
        for op in ("all_reduce", "all_gather", "reduce_scatter", "broadcast"):
            for size in (2 ** p for p in range(10, 26, 3)):
                r = Row(op, None, DType.FP32, {"backend": "gloo", "world_size": world, "message_bytes": size},
                        0.0, float(size), 1.0, 1.0, 1.0, 5)
                t = predict_collective(r, 3e9, 80e-6, truth)
                rows.append(Row(r.bench, None, r.dtype, r.params, 0.0, r.bytes_moved, t, t, t, 5))
    lf = fit_backend_link(rows, eff)
    assert lf.bandwidth_bytes_per_s == pytest.approx(3e9, rel=0.03)
    assert lf.latency_s == pytest.approx(80e-6, rel=0.05)
    assert lf.base_latency_s == pytest.approx(30e-6, rel=0.15)


def test_profile_carries_the_fitted_gloo_link(tmp_path):
    dev = invented_device(kind="cpu", efficiency=_start_eff().model_dump())
    m = _synthetic(dev, _truth_eff())
    extra_rows = []
    for size in (1024, 65536, 1 << 20, 1 << 24):
        for op in ("all_reduce", "broadcast"):
            t = 1e-4 + size / 1e9
            extra_rows.append(Row(op, None, DType.FP32, {"backend": "gloo", "world_size": 2, "message_bytes": size},
                                  0.0, float(size), t, t, t, 5))
    m = Measurements(m.rows + tuple(extra_rows), _facts("cpu"))
    cal = fit(m, dev)
    link = profile_link(load_profile(cal.save_profile(tmp_path / "p.yaml")))
    assert link == cal.links["gloo"]
    assert cal.device.efficiency.link_bandwidth_fraction == 1.0  # the link is already effective
    assert {"collective:gloo:all_reduce", "collective:gloo:broadcast"} <= set(cal.mape_by_group())


def test_fit_recovers_conv_backward_curve_and_strided_dx_exponent():
    from simtrain.specs.efficiency import ComputeCurve
    dev = invented_device()
    truth = _truth_eff().model_copy(update={"backward_compute": {OpClass.CONV: ComputeCurve(peak_fraction=0.25,
                                                                                            half_flops=1e8)},
                                            "strided_agrad_exponent": 1.0})
    rows = [r for r in _shapes() if r.op_class is not OpClass.CONV]
    for n, c, hw, stride in ((8, 64, 28, 1), (32, 128, 14, 1), (64, 256, 14, 1), (16, 64, 28, 2),
                             (32, 128, 28, 2), (64, 256, 14, 2), (4, 512, 8, 1), (4, 512, 8, 2)):
        p = counts.conv2d_out_hw(hw, hw, 3, 3, stride, 1)[0]
        geom = dict(n=n, c=c, h=hw, w=hw, k=c, r=3, s=3, stride=stride, pad=1, groups=1, p=p, q=p)
        args = (n, c, hw, hw, c, 3, 3, stride, 1, 1, 4)
        rows.append(_row("conv2d", OpClass.CONV, counts.conv2d_counts(*args), **geom))
        rows.append(_row("conv2d", OpClass.CONV, counts.conv2d_counts(*args, backward=True), "bw", 2, **geom))
    rng = np.random.default_rng(1)
    timed = []
    for r in rows:
        t = predict_row(r, dev, truth) * math.exp(0.02 * rng.standard_normal())
        timed.append(Row(r.bench, r.op_class, r.dtype, r.params, r.flops, r.bytes_moved, t, t, t, 5, r.phase, r.calls))
    got = fit_compute(timed, dev, _start_eff()).efficiency
    assert got.curve(OpClass.CONV).peak_fraction == pytest.approx(0.5, rel=0.1)
    assert got.phase_curve(OpClass.CONV, "wgrad").peak_fraction == pytest.approx(0.25, rel=0.1)
    assert got.strided_agrad_exponent == pytest.approx(1.0, abs=0.1)
    # 3×3 stride 2: dX executes 4× its FLOPs → the backward row costs (4 + 1) / 2 = 2.5× a stride-1 one
    # of equal FLOPs (compute-bound, large: half_flops negligible)
    assert got.curve(OpClass.MATMUL).peak_fraction == pytest.approx(0.7, rel=0.05)  # matmul untouched


def test_fit_recovers_the_maxpool_kind_curve_and_keeps_the_class_curve():
    """Max-pool rows fit their own curve (forward and @bw), stored under the built-model alias too;
    the elementwise class curve the rest of the rows fit stays where it was."""
    dev = invented_device()
    truth = _truth_eff().model_copy(update={"kind_compute": {
        "maxpool": ComputeCurve(peak_fraction=0.002, half_flops=0.0),
        "maxpool@bw": ComputeCurve(peak_fraction=0.0005, half_flops=0.0)}})  # compute-bound too
    pool = []
    for n, c, hw, k, s, p in ((8, 64, 32, 2, 2, 0), (8, 64, 56, 3, 2, 1), (16, 128, 16, 2, 2, 0)):
        geom = (n, c, hw, hw, k, s, p, 4)
        params = dict(n=n, c=c, h=hw, w=hw, kernel=k, stride=s, pad=p)
        pool += [_row("maxpool", OpClass.REDUCTION, counts.maxpool2d_counts(*geom), **params),
                 _row("maxpool", OpClass.REDUCTION, counts.maxpool2d_counts(*geom, backward=True), "bw", **params)]
    rows = [replace(r, median_s=t, p10_s=t, p90_s=t) for r in _shapes() + pool for t in [predict_row(r, dev, truth)]]
    got = fit_compute(rows, dev, _start_eff()).efficiency
    assert got.kind_compute["maxpool"].peak_fraction == pytest.approx(0.002, rel=0.05)
    assert got.kind_compute["maxpool2d"] == got.kind_compute["maxpool"]
    assert got.kind_compute["maxpool@bw"].peak_fraction == pytest.approx(0.0005, rel=0.1)
    assert got.curve(OpClass.ELEMENTWISE).peak_fraction == pytest.approx(0.02, rel=0.05)


def test_fit_recovers_the_matmul_panel_rate_from_skinny_gemms():
    """GEMMs with few rows (M = 1…16 against wide weights) run far below square ones of equal FLOPs:
    each call packs its k × n weight panel whatever its rows (``ComputeCurve.panel_bytes_per_s``), and
    the fit finds that rate from skinny rows, forward and backward, beside the square grid."""
    dev = invented_device()
    truth = _truth_eff()
    truth = truth.model_copy(update={"compute": dict(truth.compute, **{
        OpClass.MATMUL: truth.curve(OpClass.MATMUL).model_copy(update={"panel_bytes_per_s": 20e9})})})
    rows = [r for r in _shapes() if r.op_class is not OpClass.MATMUL or r.params["m"] >= 512]
    for m, k, n in ((1, 4096, 4096), (4, 2048, 2048), (16, 1024, 4096), (64, 1024, 1024), (128, 2048, 512),
                    (8, 4096, 1024), (4096, 64, 64)):
        rows.append(_row("gemm", OpClass.MATMUL, counts.gemm_counts(m, n, k, 4), m=m, n=n, k=k))
        rows.append(_row("gemm", OpClass.MATMUL, counts.gemm_counts(m, n, k, 4, backward=True), "bw", 2, m=m, n=n, k=k))
    rng = np.random.default_rng(2)
    timed = []
    for r in rows:
        t = predict_row(r, dev, truth) * math.exp(0.02 * rng.standard_normal())
        timed.append(Row(r.bench, r.op_class, r.dtype, r.params, r.flops, r.bytes_moved, t, t, t, 5, r.phase, r.calls))
    got = fit_compute(timed, dev, _start_eff()).efficiency.curve(OpClass.MATMUL)
    assert got.panel_bytes_per_s == pytest.approx(20e9, rel=0.2)
    assert got.peak_fraction == pytest.approx(truth.curve(OpClass.MATMUL).peak_fraction, rel=0.05)
    assert got.half_rows == 0.0  # the panel, not a rows ramp, speaks for few rows


def test_fit_finds_the_effective_cache_below_the_sysfs_size():
    """A shared machine's other tenants leave a streaming op less last-level cache than sysfs
    reports: streams of a hand-chosen truth with an 8 MB effective cache (misses at 0.3 of the
    streaming rate), fitted from the 32 MiB the machine reports, give back the 8 MB and the 0.3."""
    dev = invented_device()
    truth = _truth_eff().model_copy(update={"cache_bytes": 8e6, "cache_miss_bandwidth_fraction": 0.3})
    shapes = [r for r in _shapes() if r.bench != "copy"]
    shapes += [_row("copy", OpClass.MEMORY, counts.copy_counts(1 << p, 4), numel=1 << p) for p in range(10, 26)]
    start = truth.model_copy(update={"cache_bytes": float(32 << 20), "cache_miss_bandwidth_fraction": 0.5})
    got = fit_compute(_synthetic(dev, truth, shapes=shapes).rows, dev, start).efficiency
    assert got.cache_bytes == pytest.approx(8e6, rel=0.25)
    assert got.cache_miss_bandwidth_fraction == pytest.approx(0.3, rel=0.15)


def test_the_copies_give_back_a_sharp_knee_even_from_a_host_sized_sysfs_cache():
    """A stream past the cache that keeps almost nothing (truth: h = (C / B)^4, 8 MB, misses at 0.3),
    fitted from a start that names the host's cache (1 GB, above every copy: a VM's sysfs) — the copies'
    own stage starts below the largest copies and gives back the exponent, the size and the fraction."""
    dev = invented_device()
    truth = _truth_eff().model_copy(update={"cache_bytes": 8e6, "cache_miss_bandwidth_fraction": 0.3,
                                            "cache_hit_exponent": 4.0})
    shapes = [r for r in _shapes() if r.bench != "copy"]
    shapes += [_row("copy", OpClass.MEMORY, counts.copy_counts(1 << p, 4), numel=1 << p) for p in range(10, 26)]
    start = truth.model_copy(update={"cache_bytes": 1e9, "cache_miss_bandwidth_fraction": 0.5,
                                     "cache_hit_exponent": 1.0})
    fitted = fit_compute(_synthetic(dev, truth, shapes=shapes).rows, dev, start)
    got = fitted.efficiency
    assert "cache_hit_exponent" in fitted.names
    assert got.cache_hit_exponent == pytest.approx(4.0, rel=0.3)
    assert got.cache_bytes == pytest.approx(8e6, rel=0.25)
    assert got.cache_miss_bandwidth_fraction == pytest.approx(0.3, rel=0.15)


def test_cache_tier_comes_from_the_copies_where_other_rows_disagree(monkeypatch):
    """Rows past the cache of a mechanism the tier does not model (here: every non-copy row over 8 MB
    timed 1.8× what the truth predicts) pull a tier fitted with everything; fitted on the copies
    alone (fit_compute._cache_tier) it stays at the truth's 8 MB and 0.3, and the profile still lists
    both as fitted. With the copies' stage turned off the same rows move the miss fraction."""
    import simtrain.calibrate.fit_compute as fc
    dev = invented_device()
    truth = _truth_eff().model_copy(update={"cache_bytes": 8e6, "cache_miss_bandwidth_fraction": 0.3})
    shapes = [r for r in _shapes() if r.bench != "copy"]
    shapes += [_row("copy", OpClass.MEMORY, counts.copy_counts(1 << p, 4), numel=1 << p) for p in range(10, 26)]
    rows = [replace(r, median_s=r.median_s * 1.8, p10_s=r.p10_s * 1.8, p90_s=r.p90_s * 1.8)
            if r.bench != "copy" and r.bytes_moved > 8e6 else r for r in _synthetic(dev, truth, shapes=shapes).rows]
    start = truth.model_copy(update={"cache_bytes": float(32 << 20), "cache_miss_bandwidth_fraction": 0.5})
    staged = fit_compute(rows, dev, start)
    assert staged.efficiency.cache_miss_bandwidth_fraction == pytest.approx(0.3, rel=0.15)
    assert staged.efficiency.cache_bytes == pytest.approx(8e6, rel=0.25)
    assert {"cache_bytes", "cache_miss_bandwidth_fraction"} <= set(staged.names)
    monkeypatch.setattr(fc, "_CACHE_MIN_ROWS", 10**6)  # too few copies: the tier is fitted with everything
    joint = fit_compute(rows, dev, start).efficiency
    assert joint.cache_miss_bandwidth_fraction < 0.8 * staged.efficiency.cache_miss_bandwidth_fraction
