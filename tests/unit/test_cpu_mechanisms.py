"""Hand-derived checks of the CPU memory-system mechanisms (issue 12): the cache tier, first-touch of
fresh tensors, their microbenchmark fits, and the unseen validation set's wiring."""

from __future__ import annotations

import sys

import pytest

from simtrain.calibrate.bench_memory import MMAP_THRESHOLD_MAX_BYTES, fit_first_touch, last_level_cache_bytes
from simtrain.calibrate.predict import row_output_bytes
from simtrain.calibrate.records import Row
from simtrain.cost.compute import cache_miss_slowdown, device_efficiency, first_touch_seconds, memory_seconds
from simtrain.glossary import DType, OpClass
from simtrain.specs.hardware import Efficiency

_EFF = Efficiency(compute={}, memory_bandwidth_fraction=1.0, memory_half_bytes=0.0)


def _eff(**kw) -> Efficiency:
    return _EFF.model_copy(update=kw)


def test_cache_miss_slowdown_by_hand():
    eff = _eff(cache_bytes=1e6, cache_miss_bandwidth_fraction=0.25)
    # 4 MB moved, 1 MB cache: h = 0.25 → 0.25 + 0.75 / 0.25 = 3.25
    assert cache_miss_slowdown(4e6, eff) == pytest.approx(3.25)
    assert cache_miss_slowdown(5e5, eff) == 1.0  # fits in cache
    assert cache_miss_slowdown(4e6, _EFF) == 1.0  # no cache tier: one bandwidth


def test_a_cache_hit_exponent_keeps_less_of_a_long_stream_by_hand():
    """h = (C / B)^k: k = 2 at 4× the cache leaves h = 1/16, so 1/16 + (15/16) / 0.25 = 3.8125."""
    eff = _eff(cache_bytes=1e6, cache_miss_bandwidth_fraction=0.25, cache_hit_exponent=2.0)
    assert cache_miss_slowdown(4e6, eff) == pytest.approx(1 / 16 + (15 / 16) / 0.25)
    assert cache_miss_slowdown(1e6, eff) == 1.0  # fits: the exponent changes nothing
    assert cache_miss_slowdown(4e6, _eff(cache_bytes=1e6, cache_miss_bandwidth_fraction=0.25)) == pytest.approx(3.25)


def test_memory_seconds_with_cache_tier():
    import simtrain as st
    dev = st.load_device("host-cpu")
    bw = dev.memory_bandwidth_bytes_per_s
    eff = _eff(cache_bytes=1e6, cache_miss_bandwidth_fraction=0.5)
    # 2 MB: half from cache at bw, half at bw / 2 → 1e6 / bw + 1e6 / (bw / 2) = 3e6 / bw
    assert memory_seconds(2e6, dev, eff) == pytest.approx(3e6 / bw)
    assert memory_seconds(2e6, dev, _EFF) == pytest.approx(2e6 / bw)


def test_first_touch_only_above_threshold():
    eff = _eff(first_touch_bytes_per_s=2e9, first_touch_min_bytes=32 * 2**20)
    assert first_touch_seconds(64 * 2**20, eff) == pytest.approx(64 * 2**20 / 2e9)
    assert first_touch_seconds(16 * 2**20, eff) == 0.0
    assert first_touch_seconds(64 * 2**20, _EFF) == 0.0  # not costed by default (GPUs, uncalibrated)


def _row(bench: str, params: dict, median_s: float, op_class=None) -> Row:
    return Row(bench, op_class, DType.FP32, params, 0.0, 0.0, median_s, median_s, median_s, 5)


def _touch(numel: int, fresh: bool, median_s: float, faulted: float | None = None) -> Row:
    return Row("first_touch", None, DType.FP32, {"numel": numel, "fresh": fresh}, 0.0,
               4.0 * numel if faulted is None else faulted, median_s, median_s, median_s, 5)


def test_fit_first_touch_median_of_pairs():
    n1, n2, n3 = 10_000_000, 20_000_000, 30_000_000
    rows = [_touch(n1, True, 0.030), _touch(n1, False, 0.010), _touch(n2, True, 0.050), _touch(n2, False, 0.010),
            # fresh side faulted only 1 MB of its 120 MB: reused pages, not a first touch → left out
            _touch(n3, True, 0.0151, faulted=1e6), _touch(n3, False, 0.015)]
    got = fit_first_touch(rows)
    # 4e7 B / 0.020 s = 2e9; 8e7 B / 0.040 s = 2e9 → median 2e9 (the third pair would say 1e10)
    assert got == {"first_touch_bytes_per_s": pytest.approx(2e9), "first_touch_min_bytes": float(MMAP_THRESHOLD_MAX_BYTES)}
    assert fit_first_touch(rows[2:3]) == {}  # no reused partner: nothing to fit
    assert fit_first_touch(rows[4:]) == {}  # no pair that faulted: nothing to fit
    # the rate is over the bytes actually faulted: 3e7 of 4e7 faulted in 0.020 s → 1.5e9
    assert fit_first_touch([_touch(n1, True, 0.030, faulted=3e7), _touch(n1, False, 0.010)])[
        "first_touch_bytes_per_s"] == pytest.approx(1.5e9)


def test_first_touch_bench_records_the_bytes_it_faulted():
    pytest.importorskip("torch")
    from simtrain.calibrate.bench_memory import bench_first_touch
    from simtrain.calibrate.bench_ops import Bench, TimingPlan, grid_for
    grid = grid_for("tiny", "cpu")
    on, off = bench_first_touch(Bench("cpu", TimingPlan(warmup=1, repeats=3, min_sample_s=0.0)), grid)
    assert on.params["fresh"] and not off.params["fresh"]
    tensor_bytes = 4.0 * on.params["numel"]
    assert 0.0 <= on.bytes_moved <= 1.5 * tensor_bytes  # faulted bytes per call, at most the tensor
    if sys.platform == "linux":  # the fresh side maps its own pages: every one faults, whatever the heap holds
        assert on.bytes_moved >= 0.9 * tensor_bytes


def test_fresh_fill_faults_every_page_even_when_the_heap_has_room():
    pytest.importorskip("torch")
    if sys.platform != "linux":
        pytest.skip("minor-fault counts are Linux's")
    import resource

    import torch

    from simtrain.calibrate.bench_memory import fresh_fill
    numel = 2**20  # 4 MiB: below glibc's mmap threshold, so malloc would hand back heap pages
    heap = torch.empty(4 * numel)
    heap.fill_(1.0)
    del heap  # a faulted free region the allocator could reuse
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    fresh_fill(numel)
    faulted = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) * resource.getpagesize()
    assert faulted >= 0.9 * 4 * numel


def test_last_level_cache_from_sysfs(tmp_path, monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    for i, (typ, size, shared) in enumerate([("Data", "32K", "0"), ("Instruction", "32K", "0"),
                                              ("Unified", "1024K", "0"), ("Unified", "32768K", "0-1")]):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "type").write_text(typ + "\n")
        (d / "size").write_text(size + "\n")
        (d / "shared_cpu_list").write_text(shared + "\n")
    assert last_level_cache_bytes(tmp_path) == 32768 * 1024  # max(2 × 1 MiB private L2, 32 MiB L3)
    assert last_level_cache_bytes(tmp_path / "missing") == 0.0


def test_row_output_bytes():
    assert row_output_bytes(_row("relu", {"numel": 1000}, 1e-3, OpClass.ELEMENTWISE)) == 4000.0
    assert row_output_bytes(_row("layernorm", {"rows": 4, "cols": 8}, 1e-3, OpClass.NORM)) == 128.0
    assert row_output_bytes(_row("copy", {"numel": 1000, "bytes": 4000}, 1e-3, OpClass.MEMORY)) == 0.0


def test_first_touch_of_a_large_weight_gradient_in_a_step():
    """One 4096×4096 Linear: the weight gradient (64 MiB ≥ 32 MiB) is fresh pages every step; the
    activations and outputs at batch 2 are small. The op record writes weight and bias gradients as
    one weight-gradient tensor: Δ step = 4096 · (4096 + 1) · 4 B / rate."""
    import torch

    import simtrain as st
    torch.manual_seed(0)
    model = st.Model.from_torch(torch.nn.Linear(4096, 4096), (torch.randn(2, 4096),))
    dev = st.load_device("host-cpu")
    cfg = st.TrainConfig(global_batch_size=2, micro_batch_size=2, precision="fp32", optimizer="sgd")
    base = device_efficiency(dev)
    with_ft = dev.model_copy(update={"efficiency": base.model_copy(update={
        "first_touch_bytes_per_s": 2e9, "first_touch_min_bytes": float(MMAP_THRESHOLD_MAX_BYTES)})})
    without = dev.model_copy(update={"efficiency": base})
    delta = (st.estimate(model, st.Cluster.single(with_ft), cfg).step_time_s
             - st.estimate(model, st.Cluster.single(without), cfg).step_time_s)
    assert delta == pytest.approx(4096 * 4097 * 4 / 2e9, rel=1e-9)


def test_first_touch_counts_per_tensor_not_per_phase():
    """Cross-entropy over (128, 4096) logits per sample, captured: its backward writes two logits-sized
    gradients (nll_loss_backward's, _log_softmax_backward_data's). At batch 8, 16 MiB each
    (8 · 128 · 4096 · 4 B): neither reaches the 32 MiB threshold, though together they do: no fault.
    At batch 32, 64 MiB each: both are fresh pages, all the writes fault."""
    import dataclasses

    import simtrain as st
    from simtrain.cost.op_cost import op_cost
    from simtrain.cost.precision import regime
    from simtrain.graph.op import PhaseCounts
    from simtrain.graph.rules.registry import make_op
    dev = st.load_device("host-cpu")
    base = device_efficiency(dev)
    ft = base.model_copy(update={"first_touch_bytes_per_s": 2e9, "first_touch_min_bytes": 32.0 * 2**20})
    rule = make_op("cross_entropy", "loss", "b", rows=128, classes=4096)
    op = dataclasses.replace(rule, act_write=PhaseCounts(0.0, 2.0 * 128 * 4096, 0.0))
    for batch, faulted in ((8, 0.0), (32, 1.0)):
        plain = op_cost(op, batch, regime("fp32"), dev, base)
        fresh = op_cost(op, batch, regime("fp32"), dev, ft)
        writes = op.act_write.agrad * batch * 4.0
        assert fresh.agrad_s - plain.agrad_s == pytest.approx(faulted * writes / 2e9, rel=1e-9)


def test_unseen_set_is_apart_from_the_zoo():
    from validation.unseen import UNSEEN
    from validation.workloads import unseen_workloads, workloads
    from validation.zoo import ZOO
    assert len(UNSEEN) >= 5 and not set(UNSEEN) & set(ZOO)
    ws = unseen_workloads("small")
    assert [w.name for w in ws] == list(UNSEEN) and all(w.unseen for w in ws)
    assert not any(w.unseen for w in workloads("small"))


# --- convolution shape, backward and stride mechanisms (issue 12) ----------------------------------
def _conv_eff(**curve) -> Efficiency:
    from simtrain.specs.efficiency import ComputeCurve
    return _eff(compute={OpClass.CONV: ComputeCurve(peak_fraction=0.5, **curve)})


def test_rows_and_depth_ramps_by_hand():
    import simtrain as st
    from simtrain.cost.compute import alignment_factor, compute_seconds, matrix_peak_flops_per_s
    from simtrain.graph.op import Gemm
    dev = st.load_device("host-cpu")
    gemm = Gemm(m=12, n=64, k=48)
    rows = 96  # 12 positions × micro-batch 8
    peak = matrix_peak_flops_per_s(dev, DType.FP32) * alignment_factor(gemm, rows, dev)
    flat = compute_seconds(1e9, OpClass.CONV, dev, DType.FP32, _conv_eff(), gemm, rows)
    assert flat == pytest.approx(1e9 / (peak * 0.5))
    # rate × 96 / (96 + 96) × 48 / (48 + 16) = × 0.5 × 0.75 → time ÷ 0.375
    ramped = compute_seconds(1e9, OpClass.CONV, dev, DType.FP32, _conv_eff(half_rows=96, half_depth=16), gemm, rows)
    assert ramped == pytest.approx(flat / 0.375)
    # no GEMM geometry (a vector op): the ramps do not apply
    assert compute_seconds(1e9, OpClass.CONV, dev, DType.FP32, _conv_eff(half_rows=96)) == pytest.approx(
        compute_seconds(1e9, OpClass.CONV, dev, DType.FP32, _conv_eff()))


def test_the_weight_panel_by_hand():
    """A 16 × 1024 × 4096 fp32 GEMM packs its 1024 × 4096 weight panel, 16 MiB, once per call: at
    32 GB/s that is 16 · 2²⁰ / 32e9 = 524.288 µs on top of its FLOPs, in every phase, whatever its rows;
    a 4096-row GEMM against a 64 × 64 weight pays 16 KiB / 32e9 = 0.512 µs. A batch of 8 GEMMs packs 8
    panels; a half-precision panel moves half the bytes; no panel rate, no term."""
    import simtrain as st
    from simtrain.cost.compute import compute_seconds, panel_seconds
    from simtrain.graph.op import Gemm
    from simtrain.specs.efficiency import ComputeCurve
    dev = st.load_device("host-cpu")
    curve = ComputeCurve(peak_fraction=0.5, panel_bytes_per_s=32e9)
    skinny, tall = Gemm(m=16, n=4096, k=1024), Gemm(m=4096, n=64, k=64)
    assert panel_seconds(skinny, DType.FP32, curve) == pytest.approx(16 * 2**20 / 32e9)
    assert panel_seconds(tall, DType.FP32, curve) == pytest.approx(64 * 64 * 4 / 32e9)
    assert panel_seconds(Gemm(m=16, n=64, k=64, batch=8), DType.FP32, curve) == pytest.approx(8 * 64 * 64 * 4 / 32e9)
    assert panel_seconds(skinny, DType.BF16, curve) == pytest.approx(8 * 2**20 / 32e9)
    assert panel_seconds(skinny, DType.FP32, ComputeCurve(peak_fraction=0.5)) == 0.0
    assert panel_seconds(None, DType.FP32, curve) == 0.0
    eff = _eff(compute={OpClass.MATMUL: curve})
    flops = 2 * 16 * 1024 * 4096
    without = compute_seconds(flops, OpClass.MATMUL, dev, DType.FP32, _eff(compute={OpClass.MATMUL: ComputeCurve(
        peak_fraction=0.5)}), skinny, 16)
    for phase in ("fw", "agrad", "wgrad"):
        assert compute_seconds(flops, OpClass.MATMUL, dev, DType.FP32, eff, skinny, 16, phase) == pytest.approx(
            without + 16 * 2**20 / 32e9)


def test_the_fixed_cost_outside_the_ramps_by_hand():
    """half_flops 1e6 at rate 0.5 × peak; ramps × 0.375 (as above). Multiplied (profiles fitted before):
    (F + 1e6) / (0.5 · peak · 0.375); outside: F / (0.5 · peak · 0.375) + 1e6 / (0.5 · peak)."""
    import simtrain as st
    from simtrain.cost.compute import alignment_factor, compute_seconds, matrix_peak_flops_per_s
    from simtrain.graph.op import Gemm
    dev = st.load_device("host-cpu")
    gemm, rows = Gemm(m=12, n=64, k=48), 96
    rate = matrix_peak_flops_per_s(dev, DType.FP32) * alignment_factor(gemm, rows, dev) * 0.5
    eff = _conv_eff(half_flops=1e6, half_rows=96, half_depth=16)
    for flops in (2e3, 1e9):
        multiplied = compute_seconds(flops, OpClass.CONV, dev, DType.FP32, eff, gemm, rows)
        assert multiplied == pytest.approx((flops + 1e6) / (rate * 0.375))
        outside = compute_seconds(flops, OpClass.CONV, dev, DType.FP32,
                                  eff.model_copy(update={"fixed_cost_unramped": True}), gemm, rows)
        assert outside == pytest.approx(flops / (rate * 0.375) + 1e6 / rate)
    # without ramps (no GEMM geometry) the two forms are one
    plain = [compute_seconds(2e3, OpClass.CONV, dev, DType.FP32, e)
             for e in (eff, eff.model_copy(update={"fixed_cost_unramped": True}))]
    assert plain[0] == pytest.approx(plain[1])


def test_backward_curve_only_in_backward_phases():
    import simtrain as st
    from simtrain.cost.compute import compute_seconds
    from simtrain.specs.efficiency import ComputeCurve
    dev = st.load_device("host-cpu")
    eff = _conv_eff().model_copy(update={"backward_compute": {OpClass.CONV: ComputeCurve(peak_fraction=0.25)}})
    fw = compute_seconds(1e9, OpClass.CONV, dev, DType.FP32, eff, phase="fw")
    assert compute_seconds(1e9, OpClass.CONV, dev, DType.FP32, eff, phase="agrad") == pytest.approx(2 * fw)
    assert compute_seconds(1e9, OpClass.CONV, dev, DType.FP32, eff, phase="wgrad") == pytest.approx(2 * fw)
    # no backward curve: every phase uses the forward one (GPU profiles unchanged)
    assert compute_seconds(1e9, OpClass.CONV, dev, DType.FP32, _conv_eff(), phase="agrad") == pytest.approx(fw)


def test_strided_agrad_factor_by_hand():
    from simtrain.cost.compute import strided_agrad_factor
    assert strided_agrad_factor((2, 2), _eff(strided_agrad_exponent=1.0)) == pytest.approx(4.0)  # zero insertion
    assert strided_agrad_factor((2, 2), _eff(strided_agrad_exponent=0.5)) == pytest.approx(2.0)
    assert strided_agrad_factor((1, 1), _eff(strided_agrad_exponent=1.0)) == 1.0
    assert strided_agrad_factor((2, 2), _EFF) == 1.0  # default: a dedicated strided-dgrad kernel
    assert strided_agrad_factor(None, _eff(strided_agrad_exponent=1.0)) == 1.0


def test_strided_conv_agrad_in_op_cost():
    import simtrain as st
    from simtrain.cost.op_cost import conv_stride, op_cost
    from simtrain.cost.precision import regime
    from simtrain.graph.rules.registry import make_op
    dev = st.load_device("host-cpu")
    op = make_op("conv2d", "c", "b", in_channels=64, out_channels=64, kernel_size=3, input_size=(32, 32),
                 stride=2, padding=1)
    assert conv_stride(op) == (2, 2)
    eff = _conv_eff().model_copy(update={"memory_bandwidth_fraction": 1.0})
    plain = op_cost(op, 8, regime("fp32"), dev, eff)
    strided = op_cost(op, 8, regime("fp32"), dev, eff.model_copy(update={"strided_agrad_exponent": 1.0}))
    assert strided.fw_s == pytest.approx(plain.fw_s) and strided.wgrad_s == pytest.approx(plain.wgrad_s)
    assert strided.agrad_s == pytest.approx(4 * plain.agrad_s)  # compute-bound: 4× the executed MACs


def test_conv_stride_from_captured_shapes():
    from simtrain.cost.op_cost import conv_stride
    from simtrain.graph.op import Op, PhaseCounts
    op = Op(name="c", kind="conv2d", op_class=OpClass.CONV, block="b", flops=PhaseCounts(1, 1, 1),
            act_read=PhaseCounts(1, 1, 1), act_write=PhaseCounts(1, 1, 1), shapes=((3, 64, 64), (32, 3, 7, 7)),
            out_shape=(32, 32, 32))
    assert conv_stride(op) == (2, 2)  # 64 / 32 per dim
    import dataclasses
    assert conv_stride(dataclasses.replace(op, op_class=OpClass.MATMUL)) is None


def test_grouped_conv_tiles_channels_of_all_groups():
    import simtrain as st
    from simtrain.cost.compute import _conv_lanes, alignment_factor
    from simtrain.graph.op import Gemm
    dev = st.load_device("host-cpu")
    dw = Gemm(m=784, n=1, k=9, batch=128)  # depthwise 128 channels, 3×3, 28×28
    assert _conv_lanes(dw, OpClass.CONV) == Gemm(m=784, n=128, k=9, batch=1)
    assert _conv_lanes(dw, OpClass.MATMUL) is dw  # a batched matmul keeps its batch
    assert alignment_factor(_conv_lanes(dw, OpClass.CONV), 784 * 8, dev) >= alignment_factor(dw, 784 * 8, dev)


def test_weight_gradient_swaps_rows_and_reduction():
    import simtrain as st
    from simtrain.cost.compute import compute_seconds
    from simtrain.graph.op import Gemm
    dev = st.load_device("host-cpu")
    gemm = Gemm(m=4, n=64, k=576)  # a conv on a 2×2 map: 4 positions, 64 filters, 64 channels × 3×3
    rows = 32  # × micro-batch 8
    eff = _conv_eff(half_depth=32)
    fw = compute_seconds(1e9, OpClass.CONV, dev, DType.FP32, eff, gemm, rows, phase="fw")
    wg = compute_seconds(1e9, OpClass.CONV, dev, DType.FP32, eff, gemm, rows, phase="wgrad")
    # forward reduces over k = 576: × 576/608; dW reduces over the 32 rows: × 32/64
    assert wg / fw == pytest.approx((576 / 608) / (32 / 64))


def test_maxpool2d_counts_by_hand():
    from simtrain.calibrate.bench_ops import maxpool2d_counts
    # 1×1×4×4 fp32, 2×2 window stride 2 → 2×2 outputs; forward: 4 compares per output = 16 FLOPs;
    # bytes: read x 16·4, write y 4·4 and int64 indices 4·8 → 64 + 16 + 32 = 112
    assert maxpool2d_counts(1, 1, 4, 4, 2, 2, 0, 4) == (16.0, 112.0)
    # backward: one add per dY element (4); zero-fill dX 64, read dY 16 + indices 32, scatter into dX 16
    assert maxpool2d_counts(1, 1, 4, 4, 2, 2, 0, 4, backward=True) == (4.0, 128.0)
    # 3×3 stride 2 pad 1 on 8×8 → 4×4 outputs, 9 compares each
    assert maxpool2d_counts(1, 1, 8, 8, 3, 2, 1, 4)[0] == 16 * 9


def test_kind_curve_prices_its_kind_only():
    import simtrain as st
    from simtrain.cost.compute import compute_seconds
    from simtrain.specs.efficiency import ComputeCurve
    dev = st.load_device("host-cpu")
    vec = dev.vector_peak_flops_per_s
    eff = _eff(compute={OpClass.REDUCTION: ComputeCurve(peak_fraction=0.5)},
               kind_compute={"maxpool": ComputeCurve(peak_fraction=0.01),
                             "maxpool@bw": ComputeCurve(peak_fraction=0.1)})
    t = lambda kind, phase="fw": compute_seconds(1e6, OpClass.REDUCTION, dev, DType.FP32, eff,  # noqa: E731
                                                 phase=phase, kind=kind)
    assert t("maxpool") == pytest.approx(1e6 / (0.01 * vec))
    assert t("maxpool", "agrad") == pytest.approx(1e6 / (0.1 * vec))  # its backward curve
    assert t("avgpool") == pytest.approx(1e6 / (0.5 * vec))  # other kinds keep the class curve
    assert t(None) == pytest.approx(1e6 / (0.5 * vec))
    only_fw = eff.model_copy(update={"kind_compute": {"maxpool": ComputeCurve(peak_fraction=0.01)}})
    assert compute_seconds(1e6, OpClass.REDUCTION, dev, DType.FP32, only_fw, phase="agrad",
                           kind="maxpool") == pytest.approx(1e6 / (0.01 * vec))  # no @bw curve: its forward one


def test_maxpool_op_uses_its_kind_curve_in_op_cost():
    import simtrain as st
    from simtrain.cost.op_cost import op_cost
    from simtrain.cost.precision import regime
    from simtrain.graph.rules.registry import make_op
    from simtrain.specs.efficiency import ComputeCurve
    dev = st.load_device("host-cpu")
    op = make_op("maxpool2d", "p", "b", channels=64, input_size=(32, 32), kernel_size=2)
    assert op.kind == "maxpool2d"  # the fit stores the "maxpool" bench curve under this alias too
    base = _eff(compute={OpClass.REDUCTION: ComputeCurve(peak_fraction=1.0)})
    slow = base.model_copy(update={"kind_compute": {"maxpool2d": ComputeCurve(peak_fraction=1e-6)}})
    # 8 samples × 64·16·16 outputs × 4 compares at 1e-6 of the vector peak: far above the memory leg
    fw = op_cost(op, 8, regime("fp32"), dev, slow).fw_s
    assert fw == pytest.approx(8 * 64 * 16 * 16 * 4 / (1e-6 * dev.vector_peak_flops_per_s), rel=1e-3)
    assert op_cost(op, 8, regime("fp32"), dev, base).fw_s < fw / 100


# --- dropout's random draws (Efficiency.rng_draws_per_s, calibrate/bench_memory.py) -------------------

def test_fit_rng_median_of_pairs():
    from simtrain.calibrate.bench_memory import fit_rng
    n1, n2, n3 = 1 << 18, 1 << 20, 1 << 22
    rows = [_row("rng", {"numel": n1, "draw": True}, 0.0030), _row("rng", {"numel": n1, "draw": False}, 0.0010),
            _row("rng", {"numel": n2, "draw": True}, 0.0110), _row("rng", {"numel": n2, "draw": False}, 0.0010),
            _row("rng", {"numel": n3, "draw": True}, 0.0500), _row("rng", {"numel": n3, "draw": False}, 0.0100)]
    # 262144 / 0.002 = 1.31e8; 1048576 / 0.010 = 1.05e8; 4194304 / 0.040 = 1.05e8 → median 1.048576e8
    assert fit_rng(rows) == {"rng_draws_per_s": pytest.approx(1048576 / 0.010)}
    assert fit_rng(rows[:1]) == {}  # no fill partner: nothing to fit


def test_dropout_draws_cost_forward_only_by_hand():
    import simtrain as st
    from simtrain.cost.op_cost import op_cost
    from simtrain.cost.precision import regime
    from simtrain.graph.rules.registry import make_op
    from simtrain.specs.efficiency import ComputeCurve
    dev = st.load_device("host-cpu")
    op = make_op("dropout", "d", "b", shape=(2, 5), p=0.1)
    assert op.attr("random_draws") == 10
    base = _eff(compute={OpClass.ELEMENTWISE: ComputeCurve(peak_fraction=1.0)})
    rng = base.model_copy(update={"rng_draws_per_s": 1e6})
    a, b = op_cost(op, 3, regime("fp32"), dev, base), op_cost(op, 3, regime("fp32"), dev, rng)
    assert b.fw_s - a.fw_s == pytest.approx(3 * 10 / 1e6)  # 3 samples × 10 draws at 1e6 per second
    assert (b.agrad_s, b.wgrad_s) == (a.agrad_s, a.wgrad_s)  # the backward reuses the mask
    # sequence-parallel tp = 2 splits the dropout's tensor, and its draws, in half
    a2 = op_cost(op, 3, regime("fp32"), dev, base, tp=2, sp=True)
    b2 = op_cost(op, 3, regime("fp32"), dev, rng, tp=2, sp=True)
    assert b2.fw_s - a2.fw_s == pytest.approx(3 * 10 / 2 / 1e6)


def test_materialised_attention_with_dropout_draws_one_per_score():
    from simtrain.graph.rules.registry import make_op
    op = make_op("attention", "a", "b", heads=4, head_dim=8, seq=16, dropout=0.1)
    assert op.attr("random_draws") == 4 * 16 * 16
    assert make_op("attention", "a", "b", heads=4, head_dim=8, seq=16).attr("random_draws") is None


def test_captured_dropout_counts_its_draws_per_sample():
    torch = pytest.importorskip("torch")
    import simtrain as st
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Dropout(0.1), torch.nn.Linear(32, 4))
    model = st.Model.from_torch(net, (torch.randn(4, 16),), lambda o: o.square().mean(), name="drop")
    draws = {op.kind: op.attr("random_draws") for op in model.ops}
    assert draws["dropout"] == 32  # one per element of the (4, 32) activation, per sample
    assert draws["linear"] is None
    net.eval()  # no dropout, no draws
    model = st.Model.from_torch(net, (torch.randn(4, 16),), lambda o: o.square().mean(), name="drop-eval")
    assert all(op.attr("random_draws") is None for op in model.ops)


def test_norm_kinds_fit_their_own_curves_and_the_class_curve():
    """Layer norm and batch norm rows 3× apart per byte: each kind gets its own curve; the class
    curve (group norm and other kinds) is still fitted to all of them."""
    import simtrain as st
    from simtrain.calibrate.fit_compute import fit_compute
    from simtrain.calibrate.predict import predict_row
    from simtrain.specs.efficiency import ComputeCurve
    dev = st.load_device("host-cpu")
    truth = _eff(compute={OpClass.NORM: ComputeCurve(peak_fraction=0.05, half_flops=1e3)},
                 kind_compute={"layernorm": ComputeCurve(peak_fraction=0.15, half_flops=1e3),
                               "batchnorm": ComputeCurve(peak_fraction=0.03, half_flops=1e3)},
                 launch_overhead_s=1e-6)
    rows = []
    for bench, sizes in (("layernorm", (1e5, 1e6, 1e7)), ("batchnorm", (1e5, 1e6, 1e7))):
        for flops in sizes:
            probe = Row(bench, OpClass.NORM, DType.FP32, {"numel": flops}, flops, 1.0, 1.0, 1.0, 1.0, 5)
            t = predict_row(probe, dev, truth)
            rows.append(Row(bench, OpClass.NORM, DType.FP32, {"numel": flops}, flops, 1.0, t, t, t, 5))
    start = _eff(compute={OpClass.NORM: ComputeCurve(peak_fraction=0.5, half_flops=1e4)}, launch_overhead_s=1e-6)
    eff = fit_compute(rows, dev, start).efficiency
    assert eff.kind_compute["layernorm"].peak_fraction == pytest.approx(0.15, rel=0.05)
    assert eff.kind_compute["batchnorm"].peak_fraction == pytest.approx(0.03, rel=0.05)
    assert 0.03 < eff.compute[OpClass.NORM].peak_fraction < 0.15  # the class: between its kinds
    # a kind measured forward only runs its backward on its forward curve
    assert eff.phase_curve(OpClass.NORM, "agrad", "layernorm") == eff.kind_compute["layernorm"]
    assert eff.phase_curve(OpClass.NORM, "agrad", "groupnorm") == eff.compute[OpClass.NORM]


def test_merge_passes_takes_the_median_of_pass_medians():
    from simtrain.calibrate.robust import merge_passes
    def r(median, p10, p90, engine):
        return Row("gemm", OpClass.MATMUL, DType.FP32, {"m": 8, "autograd_call_s": engine}, 1.0, 1.0, median, p10, p90, 5)
    merged = merge_passes([[r(1.0, 0.9, 1.1, 1e-5)], [r(3.0, 2.8, 3.3, 2e-5)], [r(1.2, 1.1, 1.4, 1e-5)]])
    assert len(merged) == 1  # the engine cost differs between passes: still one benchmark
    m = merged[0]
    assert (m.median_s, m.p10_s, m.p90_s, m.repeats) == (1.2, 0.9, 3.3, 15)  # one slow pass: one vote
    assert (m.ci_low_s, m.ci_high_s) == (1.0, 3.0)
    assert merge_passes([[r(1.0, 0.9, 1.1, 0.0)]])[0].median_s == 1.0
    # first touch: the fresh side's faulted bytes are a median over the passes too (two of three
    # passes found reused pages: the merged row says so, and fit_first_touch leaves the size out)
    passes = [[_touch(10_000_000, True, t, faulted=b), _touch(10_000_000, False, 0.010)]
              for t, b in ((0.030, 4e7), (0.011, 1e5), (0.012, 2e5))]
    fresh = merge_passes(passes)[0]
    assert (fresh.median_s, fresh.bytes_moved) == (0.012, 2e5)
    assert fit_first_touch(merge_passes(passes)) == {}


def test_pass_centre_is_a_trimmed_mean_that_weighs_two_modes_by_their_count():
    """By hand: up to four passes, the median; five, the mean of the middle three; ten, of the middle
    six. Ten passes of a bimodal bench, 4 fast (1.0) and 6 slow (2.0) against 6 fast and 4 slow: the
    median jumps 2.0 → 1.0, the trimmed mean moves 1.67 → 1.33 (with the extremes a slow spell of 9.0
    is still left off)."""
    from simtrain.calibrate.robust import merge_passes, pass_centre
    assert pass_centre([3.0]) == 3.0 and pass_centre([1.0, 3.0]) == 2.0
    assert pass_centre([1.0, 9.0, 2.0]) == 2.0 and pass_centre([1.0, 2.0, 4.0, 9.0]) == 3.0
    assert pass_centre([1.0, 2.0, 3.0, 4.0, 90.0]) == pytest.approx(3.0)
    mostly_slow = [1.0] * 4 + [2.0] * 5 + [9.0]
    mostly_fast = [1.0] * 6 + [2.0] * 3 + [9.0]
    assert pass_centre(mostly_slow) == pytest.approx(10.0 / 6.0)  # 1, 1, 2, 2, 2, 2
    assert pass_centre(mostly_fast) == pytest.approx(8.0 / 6.0)  # 1, 1, 1, 1, 2, 2
    rows = [[Row("relu", OpClass.ELEMENTWISE, DType.FP32, {"numel": 8}, 0.0, 1.0, t, t, t, 5)] for t in mostly_slow]
    merged = merge_passes(rows)[0]
    assert merged.median_s == pytest.approx(10.0 / 6.0) and (merged.p10_s, merged.p90_s) == (1.0, 9.0)


def test_backward_working_set_decides_the_cache_share():
    import simtrain as st
    dev = st.load_device("host-cpu")
    eff = _eff(cache_bytes=1e6, cache_miss_bandwidth_fraction=0.25)
    alone = memory_seconds(5e5, dev, eff)  # fits: one tier
    # the same 0.5 MB read in a backward whose saved set is 4 MB: h = 0.25 → 0.25 + 0.75 / 0.25 = 3.25
    assert memory_seconds(5e5, dev, eff, working_set_bytes=4e6) == pytest.approx(3.25 * alone)
    assert memory_seconds(5e5, dev, _EFF, working_set_bytes=4e6) == memory_seconds(5e5, dev, _EFF)  # no tier


def test_grouped_convolutions_have_their_own_curve_key():
    from simtrain.cost.compute import GROUPED_CONV_KIND, curve_kind
    from simtrain.graph.op import Gemm
    assert curve_kind("conv2d", OpClass.CONV, Gemm(64, 4, 36, 8)) == GROUPED_CONV_KIND  # 8 groups
    assert curve_kind("conv2d", OpClass.CONV, Gemm(64, 32, 288, 1)) == "conv2d"          # dense
    assert curve_kind("bmm", OpClass.MATMUL, Gemm(64, 64, 64, 8)) == "bmm"               # batched GEMM: not a conv


def test_depthwise_convolutions_have_their_own_curve_and_fall_back_to_the_grouped_one():
    """One output channel per group (Gemm n = 1) is depthwise: its own curve where the profile has one,
    else the grouped curve (a profile fitted before the split). compute_seconds = flops / achieved with
    achieved = peak · sustained · pf · flops / (flops + half_flops) (no rows / depth ramp here)."""
    from simtrain.calibrate.fit_compute import row_kind
    from simtrain.cost.compute import (
        DEPTHWISE_CONV_KIND,
        GROUPED_CONV_KIND,
        compute_seconds,
        curve_kind,
        matrix_peak_flops_per_s,
    )
    from simtrain.graph.op import Gemm
    from simtrain.specs.hardware import ComputeCurve
    dw = Gemm(64, 1, 9, 128)  # 128 channels, 3×3, 8×8 map
    assert curve_kind("conv2d", OpClass.CONV, dw) == DEPTHWISE_CONV_KIND
    params = {"n": 16, "c": 128, "h": 8, "w": 8, "k": 128, "r": 3, "s": 3, "stride": 1, "pad": 1, "p": 8, "q": 8}
    assert row_kind(_row("conv2d", dict(params, groups=128), 1e-4)) == DEPTHWISE_CONV_KIND
    assert row_kind(_row("conv2d", dict(params, groups=32), 1e-4)) == GROUPED_CONV_KIND
    import simtrain as st
    dev = st.load_device("host-cpu")
    grouped = ComputeCurve(peak_fraction=0.5, half_flops=0.0)
    depthwise = ComputeCurve(peak_fraction=0.1, half_flops=1e6)
    old = _EFF.model_copy(update={"kind_compute": {GROUPED_CONV_KIND: grouped}})
    new = _EFF.model_copy(update={"kind_compute": {GROUPED_CONV_KIND: grouped, DEPTHWISE_CONV_KIND: depthwise}})
    flops = 2 * 9 * 64 * 128 * 16.0  # 2.36 MFLOP
    peak = matrix_peak_flops_per_s(dev, DType.FP32) * _EFF.sustained_clock_fraction
    assert compute_seconds(flops, OpClass.CONV, dev, DType.FP32, old, dw, 64 * 16) == pytest.approx(
        flops / (peak * 0.5))
    assert compute_seconds(flops, OpClass.CONV, dev, DType.FP32, new, dw, 64 * 16) == pytest.approx(
        (flops + 1e6) / (peak * 0.1))


def test_profiler_overhead_is_taken_out_per_unit():
    from simtrain.calibrate.trace import TraceTimes
    from simtrain.calibrate.trace_fit import without_profiler_overhead
    t = TraceTimes(seconds={"matmul": 0.080, "elementwise": 0.015}, steps=5, step_s=0.110,
                   units={"matmul": 10.0, "elementwise": 90.0})
    # traced 110 ms vs 100 ms untraced: 10 ms over 100 units = 0.1 ms per unit
    got = without_profiler_overhead(t, 0.100)
    assert got.seconds["matmul"] == pytest.approx(0.080 - 10 * 1e-4)
    assert got.seconds["elementwise"] == pytest.approx(0.015 - 90 * 1e-4)
    assert got.step_s == 0.100
    assert without_profiler_overhead(t, 0.120) is t  # the trace was not slower: nothing to take out
    heavy = without_profiler_overhead(t, 0.010)      # an excess larger than a group: floored at 10 %
    assert heavy.seconds["elementwise"] == pytest.approx(0.0015)


# --- NCHW layout reorders of dense convolutions (Efficiency.conv_layout_bytes_per_s, bench_memory.py) --

def _layout_row(nchw: bool, median_s: float, c: int = 64, groups: int = 1) -> Row:
    params = {"n": 2, "c": c, "h": 8, "w": 8, "k": 32, "r": 1, "s": 1, "stride": 1, "pad": 0, "groups": groups,
              "p": 8, "q": 8, "nchw": nchw}
    return _row("conv_layout", params, median_s)


def test_fit_conv_layout_median_of_dense_pairs():
    from simtrain.calibrate.bench_memory import activation_bytes, fit_conv_layout
    # 2·64·8·8 + 2·32·8·8 = 12288 elements = 49152 bytes
    assert activation_bytes(_layout_row(True, 1.0).params) == 49152.0
    rows = [_layout_row(True, 0.0030), _layout_row(False, 0.0010),        # 49152 / 0.002 = 2.4576e7
            _layout_row(True, 0.0050, c=128), _layout_row(False, 0.0010, c=128),  # 81920 / 0.004 = 2.048e7
            _layout_row(True, 0.0010, c=16), _layout_row(False, 0.0020, c=16),    # NCHW faster: left out
            _layout_row(True, 0.0090, groups=4), _layout_row(False, 0.0010, groups=4)]  # grouped: left out
    got = fit_conv_layout(rows)
    assert got == {"conv_layout_bytes_per_s": pytest.approx(0.5 * (49152 / 0.002 + 81920 / 0.004))}
    assert fit_conv_layout(rows[4:]) == {}  # nothing usable


def test_conv_layout_seconds_on_dense_conv_phases_by_hand():
    import simtrain as st
    from simtrain.cost.compute import conv_layout_seconds
    from simtrain.cost.op_cost import op_cost
    from simtrain.cost.precision import regime
    from simtrain.graph.rules.registry import make_op
    assert conv_layout_seconds(1e6, _eff()) == 0.0  # not calibrated: free
    assert conv_layout_seconds(1e6, _eff(conv_layout_bytes_per_s=1e9)) == pytest.approx(1e-3)
    dev = st.load_device("host-cpu")
    eff = _conv_eff().model_copy(update={"memory_bandwidth_fraction": 1.0})
    layout = eff.model_copy(update={"conv_layout_bytes_per_s": 1e9})
    dense = make_op("conv2d", "c", "b", in_channels=16, out_channels=32, kernel_size=3, input_size=(8, 8), padding=1)
    a, b = op_cost(dense, 4, regime("fp32"), dev, eff), op_cost(dense, 4, regime("fp32"), dev, layout)
    in_b, out_b = 4 * 16 * 8 * 8 * 4, 4 * 32 * 8 * 8 * 4  # fp32 input and output of 4 samples
    assert b.fw_s - a.fw_s == pytest.approx((in_b + out_b) / 1e9)      # reads X, writes Y
    assert b.agrad_s - a.agrad_s == pytest.approx((out_b + in_b) / 1e9)  # reads dY, writes dX
    assert b.wgrad_s - a.wgrad_s == pytest.approx((in_b + out_b) / 1e9)  # reads X and dY
    grouped = make_op("conv2d", "g", "b", in_channels=16, out_channels=16, kernel_size=3, input_size=(8, 8),
                      padding=1, groups=16)
    ga, gb = op_cost(grouped, 4, regime("fp32"), dev, eff), op_cost(grouped, 4, regime("fp32"), dev, layout)
    assert (gb.fw_s, gb.bw_s) == (ga.fw_s, ga.bw_s)  # grouped: its own curve holds its layout handling


def test_conv_rows_predicted_with_their_layout_reorders():
    from simtrain.calibrate.predict import row_conv_layout_bytes
    params = {"n": 2, "c": 64, "h": 8, "w": 8, "k": 32, "r": 1, "s": 1, "stride": 1, "pad": 0, "groups": 1,
              "p": 8, "q": 8}
    fw = _row("conv2d", params, 1e-3, OpClass.CONV)
    assert row_conv_layout_bytes(fw) == 49152.0
    bw = Row("conv2d", OpClass.CONV, DType.FP32, params, 0.0, 0.0, 1e-3, 1e-3, 1e-3, 5, phase="bw", calls=2)
    assert row_conv_layout_bytes(bw) == 2 * 49152.0  # dX and dW each read and write the pair
    assert row_conv_layout_bytes(_row("conv2d", dict(params, groups=2), 1e-3, OpClass.CONV)) == 0.0
    assert row_conv_layout_bytes(_row("gemm", {"m": 1, "n": 1, "k": 1}, 1e-3, OpClass.MATMUL)) == 0.0


def test_paired_benches_alternate_their_samples():
    """time_pair samples a, b, a, b, …: a slow spell moves both medians, not only one side's."""
    from simtrain.calibrate.bench_ops import Bench, TimingPlan, time_pair
    calls: list[str] = []
    plan = TimingPlan(warmup=1, repeats=4, min_sample_s=0.0, max_total_s=10.0, max_inner=1)
    ta, tb = time_pair(lambda: calls.append("a"), lambda: calls.append("b"), plan)
    assert ta.repeats == tb.repeats == 4 and ta.inner == tb.inner == 1
    # warm-up a b; one probe each (a, b) to size the samples; then four alternated samples
    assert calls == ["a", "b", "a", "b"] + ["a", "b"] * 4
    rows = Bench("cpu", plan).row_pair("x", {"numel": 3}, "on", (0.0, 12.0), lambda: None, lambda: None)
    assert [r.params["on"] for r in rows] == [True, False]
    assert all(r.params["numel"] == 3 and r.op_class is None and r.repeats == 4 for r in rows)


def test_cpu_flash_attention_skips_only_whole_key_blocks():
    """PyTorch's CPU flash kernel (query blocks 32 / 64 / 256, key blocks 512) runs every key block
    that starts before a query block's last key. s ≤ 512: one key block, nothing skipped. s = 1024,
    query blocks of 256: last keys 256, 512, 768, 1024 → 512, 512, 1024, 1024 keys run → 3/4.
    s = 2048: (512 + 512 + 1024 + 1024 + 1536 + 1536 + 2048 + 2048) / (8 · 2048) = 5/8."""
    from simtrain.cost.op_cost import cpu_flash_blocks, executed_flops_fraction
    from simtrain.graph.rules.attention import block_causal_fraction
    from simtrain.graph.rules.registry import make_op
    assert cpu_flash_blocks(128) == (32, 512) and cpu_flash_blocks(512) == (64, 512)
    assert cpu_flash_blocks(1024) == (256, 512)
    for s in (64, 128, 512):
        assert block_causal_fraction(s, s, *cpu_flash_blocks(s)) == 1.0
    assert block_causal_fraction(1024, 1024, 256, 512) == pytest.approx(0.75)
    assert block_causal_fraction(2048, 2048, 256, 512) == pytest.approx(0.625)
    # blocks of one query and one key are the exact triangle: (s + 1) / (2s)
    assert block_causal_fraction(16, 16, 1, 1) == pytest.approx(17 / 32)
    import simtrain as st
    op = make_op("attention", "a", "b", heads=4, head_dim=8, seq=1024, causal=True, fused=True)
    assert executed_flops_fraction(op, st.load_device("host-cpu")) == pytest.approx(0.75)
    assert executed_flops_fraction(op, st.load_device("h100-sxm5-80gb")) == pytest.approx(1025 / 2048)
    assert executed_flops_fraction(op) == pytest.approx(1025 / 2048)


def test_causal_sdpa_rows_run_the_blocks_a_cpu_executes():
    """A causal sdpa row counts the kept triangle; on a CPU its prediction runs the executed blocks:
    at s = 128 the whole square, (2·128)/(129) × the counted FLOPs; on a GPU the counted FLOPs."""
    import simtrain as st
    from simtrain.calibrate.predict import row_attention_factor
    params = {"batch": 2, "heads": 4, "seq_q": 128, "seq_kv": 128, "head_dim": 64, "causal": True}
    row = Row(bench="sdpa", op_class=OpClass.ATTENTION, dtype=DType.FP32, phase="fw", params=params,
              flops=1.0, bytes_moved=1.0, median_s=1e-3, p10_s=1e-3, p90_s=1e-3, repeats=3)
    assert row_attention_factor(row, st.load_device("host-cpu")) == pytest.approx(256 / 129)
    assert row_attention_factor(row, st.load_device("h100-sxm5-80gb")) == 1.0
    bidir = Row(bench="sdpa", op_class=OpClass.ATTENTION, dtype=DType.FP32, phase="fw",
                params=dict(params, causal=False), flops=1.0, bytes_moved=1.0, median_s=1e-3, p10_s=1e-3,
                p90_s=1e-3, repeats=3)
    assert row_attention_factor(bidir, st.load_device("host-cpu")) == 1.0


def test_backward_matrix_rows_first_touch_their_gradients_per_tensor():
    """A GEMM row's backward returns dA (m×k) and dB (k×n) as new tensors: with m = 1, k = n = 4096
    in fp32, dB is 64 MiB (fresh pages at a 32 MiB threshold) and dA 16 KiB (reused)."""
    import simtrain as st
    from simtrain.calibrate.predict import predict_row, row_gradient_tensors
    params = {"m": 1, "k": 4096, "n": 4096}
    row = Row(bench="gemm", op_class=OpClass.MATMUL, dtype=DType.FP32, phase="bw", params=params, flops=6.7e7,
              bytes_moved=1.3e8, median_s=0.04, p10_s=0.04, p90_s=0.04, repeats=3, calls=2)
    assert row_gradient_tensors(row) == (1 * 4096 * 4, 4096 * 4096 * 4)
    assert row_gradient_tensors(Row(**{**row.__dict__, "phase": "fw"})) == ()
    dev = st.load_device("host-cpu")
    base = device_efficiency(dev)
    ft = base.model_copy(update={"first_touch_bytes_per_s": 2e9, "first_touch_min_bytes": 32.0 * 2**20})
    assert predict_row(row, dev, ft) - predict_row(row, dev, base) == pytest.approx(4096 * 4096 * 4 / 2e9)


def test_cpu_flash_tiles_count_query_blocks_times_key_blocks_run():
    """Tiles per head: s = 64, query blocks of 32 → 2 tiles of one key block; s = 197 (≥ 192: blocks
    of 64) → 4; s = 1024 (blocks of 256, key blocks of 512): 4 × 2 = 8, and causal 1 + 1 + 2 + 2 = 6
    (last visible keys 256, 512, 768, 1024)."""
    from simtrain.cost.attention_work import cpu_flash_tiles
    assert cpu_flash_tiles(64, 64, False) == 2 and cpu_flash_tiles(64, 64, True) == 2
    assert cpu_flash_tiles(197, 197, False) == 4
    assert cpu_flash_tiles(1024, 1024, False) == 8 and cpu_flash_tiles(1024, 1024, True) == 6


def test_flash_tiles_put_the_attention_ramp_per_tile_on_a_cpu():
    """With ``flash_tiles`` an attention op's forward is F / (P·pf) + T · h / (P·pf): 16 samples ×
    8 heads × 2 tiles (s = 64) = 256 tiles, each paying the ramp h once; without, the ramp is paid
    once per call. The sdpa row of the same shape is predicted the same way (fit = estimate). A GPU
    never counts tiles."""
    import simtrain as st
    from simtrain.calibrate.predict import predict_row, row_flash_tiles
    from simtrain.cost.op_cost import op_cost
    from simtrain.cost.precision import regime
    from simtrain.graph.rules.registry import make_op
    from simtrain.specs.hardware import ComputeCurve
    dev = st.load_device("host-cpu")
    base = device_efficiency(dev)
    curve = ComputeCurve(peak_fraction=0.5, half_flops=1e6)
    flat = base.model_copy(update={"compute": {**base.compute, OpClass.ATTENTION: curve},
                                   "memory_bandwidth_fraction": 1.0, "memory_half_bytes": 0.0,
                                   "launch_overhead_s": 0.0, "step_call_overhead_s": 0.0, "cache_bytes": 0.0})
    tiled = flat.model_copy(update={"flash_tiles": True})
    op = make_op("attention", "a", "b", heads=8, head_dim=32, seq=64, causal=False, fused=True)
    fw_flops = 4 * 64 * 64 * 32 * 8 * 16  # 4·s²·d per head, 8 heads, 16 samples
    rate = dev.peak_flops_per_s[DType.FP32].value * flat.sustained_clock_fraction * 0.5
    reg = regime("fp32")
    assert op_cost(op, 16, reg, dev, flat).fw_s == pytest.approx((fw_flops + 1e6) / rate)
    assert op_cost(op, 16, reg, dev, tiled).fw_s == pytest.approx((fw_flops + 256 * 1e6) / rate)
    params = {"batch": 16, "heads": 8, "seq_q": 64, "seq_kv": 64, "head_dim": 32, "causal": False}
    row = Row(bench="sdpa", op_class=OpClass.ATTENTION, dtype=DType.FP32, phase="fw", params=params,
              flops=float(fw_flops), bytes_moved=1.0, median_s=1e-3, p10_s=1e-3, p90_s=1e-3, repeats=3)
    assert row_flash_tiles(row, dev, tiled) == 256 and row_flash_tiles(row, dev, flat) == 1
    assert predict_row(row, dev, tiled) == pytest.approx(op_cost(op, 16, reg, dev, tiled).fw_s)
    gpu = st.load_device("h100-sxm5-80gb")
    gpu_eff = device_efficiency(gpu)
    assert op_cost(op, 16, reg, gpu, gpu_eff.model_copy(update={"flash_tiles": True})).fw_s == \
        pytest.approx(op_cost(op, 16, reg, gpu, gpu_eff).fw_s)
