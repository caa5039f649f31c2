"""A device the host runs ahead of (CUDA): an op costs max(device time, issue time), each op class has
its own issue time, and the fixed cost of a GEMM is not wasted in its padded tiles. Every expected
number is derived by hand from the invented device (1 TFLOP/s fp32, 100 GB/s; tests/conftest.py)."""

import math
from dataclasses import replace

import pytest

from simtrain.calibrate.fit_compute import fit_compute
from simtrain.calibrate.predict import predict_row
from simtrain.calibrate.records import Row
from simtrain.cost.compute import compute_seconds, issue_bound, launch_seconds, op_seconds
from simtrain.glossary import DType, OpClass
from simtrain.graph.op import Gemm
from simtrain.specs.hardware import Efficiency
from tests.conftest import _s, invented_device


def _eff(**over) -> Efficiency:
    data = {"compute": {c.value: {"peak_fraction": 1.0, "half_flops": 0.0} for c in OpClass},
            "memory_bandwidth_fraction": 1.0, "launch_overhead_s": 10e-6}
    return Efficiency.model_validate(data | over)


def test_issue_bound_sums_on_a_serial_device_and_overlaps_on_an_async_one():
    assert issue_bound(3e-6, 10e-6, _eff()) == pytest.approx(13e-6)
    # the p-norm with p = 8: the larger leg, raised by (1 + (small / large)^8)^(1/8)
    assert issue_bound(3e-6, 10e-6, _eff(launch_async=True)) == pytest.approx(10e-6 * (1 + 0.3 ** 8) ** 0.125)
    assert issue_bound(30e-6, 10e-6, _eff(launch_async=True)) == pytest.approx(30e-6 * (1 + 3 ** -8) ** 0.125)
    assert issue_bound(10e-6, 10e-6, _eff(launch_async=True)) == pytest.approx(10e-6 * 2 ** 0.125)  # 1.09 ×


def test_each_class_issues_at_its_own_time_and_the_rest_share_one():
    eff = _eff(class_launch_overhead_s={"conv": 40e-6}, backward_class_launch_overhead_s={"conv": 15e-6})
    assert launch_seconds(OpClass.CONV, eff) == 40e-6
    assert launch_seconds(OpClass.MATMUL, eff) == 10e-6
    assert launch_seconds(None, eff) == 10e-6
    # the engine issues a conv's backward kernels at their own figure; a GEMM's at its forward one
    assert launch_seconds(OpClass.CONV, eff, "agrad") == launch_seconds(OpClass.CONV, eff, "bw") == 15e-6
    assert launch_seconds(OpClass.MATMUL, eff, "wgrad") == 10e-6


def test_op_seconds_hides_a_small_kernel_behind_its_issue_and_the_issue_behind_a_large_one():
    dev = invented_device()
    eff = _eff(launch_async=True, class_launch_overhead_s={"elementwise": 5e-6})
    # 1 MB moved at 100 GB/s = 10 µs of device time against 5 µs of issue: the device's 10 µs
    assert op_seconds(0.0, 1e6, OpClass.ELEMENTWISE, dev, efficiency=eff) == pytest.approx(
        10e-6 * (1 + 0.5 ** 8) ** 0.125)
    # 0.1 MB = 1 µs of device time: the issue's 5 µs
    assert op_seconds(0.0, 1e5, OpClass.ELEMENTWISE, dev, efficiency=eff) == pytest.approx(
        5e-6 * (1 + 0.2 ** 8) ** 0.125)
    # a serial device adds them: 1 µs + 10 µs (no class entry for memory: the shared figure)
    assert op_seconds(0.0, 1e5, OpClass.MEMORY, dev, efficiency=_eff()) == pytest.approx(11e-6)


def _gemm_row(n: int, seconds: float = 1.0, phase: str = "fw", calls: int = 1, engine_s: float = 0.0) -> Row:
    flops = 2.0 * n ** 3 * calls
    params = {"m": n, "n": n, "k": n} | ({"autograd_call_s": engine_s} if engine_s else {})
    return Row("gemm", OpClass.MATMUL, DType.FP32, params, flops, 12.0 * n * n * calls, seconds, seconds,
               seconds, 5, phase, calls)


def test_a_backward_row_is_priced_before_the_bench_took_the_engine_call_off():
    dev = invented_device()
    eff = _eff(launch_async=True)
    # 2 GEMMs of 2·100³ FLOPs at 1 TFLOP/s = 4 µs of device time; issue 2 × 10 µs + 30 µs engine = 50 µs,
    # the row's time net of the engine 50 − 30 = 20 µs (the smooth max adds 50·((1 + 0.08^8)^⅛ − 1) ≈ 1e-14 s)
    assert predict_row(_gemm_row(100, 1.0, "bw", 2, 30e-6), dev, eff) == pytest.approx(20e-6, rel=1e-6)
    # 2 × 2·1000³ FLOPs = 4 ms of device time hides the 50 µs issue: 4 ms − 30 µs
    assert predict_row(_gemm_row(1000, 1.0, "bw", 2, 30e-6), dev, eff) == pytest.approx(4e-3 - 30e-6, rel=1e-6)


def test_the_fit_tells_each_class_issue_time_from_its_floor():
    dev = invented_device()
    truth = _eff(launch_async=True, class_launch_overhead_s={"matmul": 20e-6, "elementwise": 8e-6})
    rows = [_gemm_row(n) for n in (16, 32, 64, 128, 256, 512, 1024, 2048)]
    rows += [Row("add", OpClass.ELEMENTWISE, DType.FP32, {"numel": n}, float(n), 12.0 * n, 1.0, 1.0, 1.0, 5)
             for n in (1 << 10, 1 << 14, 1 << 18, 1 << 22, 1 << 24, 1 << 26)]
    rows = [replace(r, median_s=(t := predict_row(r, dev, truth)), p10_s=t, p90_s=t) for r in rows]
    start = _eff(launch_async=True, launch_overhead_s=1e-6)
    got = fit_compute(rows, dev, start).efficiency
    assert launch_seconds(OpClass.MATMUL, got) == pytest.approx(20e-6, rel=0.05)
    assert launch_seconds(OpClass.ELEMENTWISE, got) == pytest.approx(8e-6, rel=0.05)


def test_padding_wastes_the_flops_slots_but_not_the_fixed_cost():
    tile = {"kind": "tensor_core", "units_count": _s(1), "fma_per_clock_per_unit": {"fp32": 250.0},
            "clock_hz": _s(2e9), "tile": [128, 128, 32], "parallel_tiles": 4, "source": "test"}
    dev = invented_device(matrix_unit=tile)  # 1 × 250 FMA × 2 × 2 GHz = the 1 TFLOP/s fp32 datasheet peak
    eff = _eff(compute={c.value: {"peak_fraction": 1.0, "half_flops": 1e6} for c in OpClass})
    g = Gemm(m=2, n=8, k=8)
    # the best tile is the spec tile's half in m and n, 64×64×32: useful 2·8·8 / (64·64·32) = 1/1024,
    # and its 1 tile fills 1 of 4 slots: × 1/4
    align = (2 * 8 * 8) / (64 * 64 * 32) / 4
    want = 256.0 / (1e12 * align) + 1e6 / 1e12  # the FLOPs at the aligned rate, the fixed cost at the peak
    assert compute_seconds(256.0, OpClass.MATMUL, dev, DType.FP32, eff, g, 2) == pytest.approx(want)
    assert math.isclose(want, 1.048576e-6 + 1e-6)  # before: (256 + 1e6) / (1e12 · align) ≈ 4.1 ms


def test_the_jacobian_pattern_keeps_each_parameter_to_its_own_rows():
    from simtrain.calibrate.fit_compute import jacobian_sparsity
    rows = [_gemm_row(64), Row("add", OpClass.ELEMENTWISE, DType.FP32, {"numel": 8}, 8.0, 96.0, 1.0, 1.0, 1.0, 5)]
    names = ["matmul.peak_fraction", "launch:elementwise", "launch_overhead_s", "kind:layernorm.half_flops"]
    pattern = jacobian_sparsity(rows, names)
    # the GEMM row moves with the matmul curve and the shared globals; the add row with its class's
    # launch and the globals; no row is a layer norm; then the prior's identity
    assert pattern.tolist() == [[1, 0, 1, 0], [0, 1, 1, 0], [1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]


@pytest.mark.parametrize("async_", [False, True])
def test_the_steps_own_host_time_adds_once_per_step_in_both_engines(async_):
    import simtrain as st
    from simtrain.cost.compute import device_efficiency
    base = st.load_device("h200-sxm-141gb")
    eff = device_efficiency(base).model_copy(update={"launch_async": async_})
    cfg = dict(global_batch_size=32, micro_batch_size=8, optimizer="adamw", precision="fp32")
    model = st.load_model("mlp-mnist")

    def times(e: Efficiency) -> tuple[float, float]:
        cluster = st.Cluster.single(base.model_copy(update={"efficiency": e}))
        return st.estimate(model, cluster, cfg).step_time_s, st.simulate(model, cluster, cfg).step_time_s
    est0, sim0 = times(eff)
    est1, sim1 = times(eff.model_copy(update={"step_host_overhead_s": 7e-4}))
    # four accumulated micro-batches, one optimizer step: 0.7 ms once, never hidden under the kernels
    assert est1 - est0 == pytest.approx(7e-4, rel=1e-9)
    assert sim1 - sim0 == pytest.approx(7e-4, rel=1e-6)
    assert sim1 == pytest.approx(est1, rel=1e-9)


def test_the_capture_counts_each_phases_kernel_calls_and_an_async_device_issues_them():
    import torch
    import torch.nn as nn

    import simtrain as st
    from simtrain.cost.op_cost import op_cost
    from simtrain.cost.precision import regime
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    model = st.Model.from_torch(m, (torch.randn(3, 4),), lambda out: out.square().mean(), name="t")
    ops = {op.name: op for op in model.ops}
    # forward addmm; no input gradient for the first layer (its input needs none); weight gradient mm
    # and the bias's sum. The second layer also has its input gradient's mm; ReLU: threshold_backward
    def calls(name: str) -> tuple[float, float, float]:
        k = ops[name].attr("aten_kernels")
        return k.fw, k.agrad, k.wgrad
    assert calls("0/linear") == (1.0, 0.0, 2.0)
    assert calls("2/linear") == (1.0, 1.0, 2.0)
    assert calls("1/relu") == (1.0, 1.0, 0.0)
    # a device so fast the issue is everything: 20 µs a kernel, 2 kernels in the second layer's wgrad
    dev = invented_device()
    reg = regime("fp32")
    fast = _eff(launch_overhead_s=20e-6, launch_async=True,
                compute={c.value: {"peak_fraction": 1.0, "half_flops": 0.0} for c in OpClass})
    got = op_cost(ops["2/linear"], 3, reg, dev, fast)
    assert got.wgrad_s == pytest.approx(2 * 20e-6, rel=1e-3)
    # serial (a CPU's calibration): one launch a phase, as before, on top of the (tiny) work
    serial = op_cost(ops["2/linear"], 3, reg, dev, fast.model_copy(update={"launch_async": False}))
    assert serial.wgrad_s == pytest.approx(20e-6, rel=1e-3)
