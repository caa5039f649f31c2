"""The roofline op-time function: each leg and each matrix-unit effect, derived by hand."""

import pytest

from simtrain.cost.compute import alignment_factor, op_seconds
from simtrain.glossary import OpClass
from simtrain.graph.op import Gemm
from tests.conftest import invented_device


def _s(v):
    return {"value": v, "source": "unit test", "mark": "U"}


def gpu(tile=(128, 128, 32), slots=4):
    unit = {"kind": "tensor_core", "units_count": _s(4), "fma_per_clock_per_unit": {"bf16": 1000},
            "clock_hz": _s(1e9), "tile": list(tile), "parallel_tiles": slots}
    return invented_device(matrix_unit=unit)


def test_compute_leg_with_efficiency_curve():
    eff = {"compute": {c.value: {"peak_fraction": 0.8, "half_flops": 1e9} for c in OpClass},
           "memory_bandwidth_fraction": 1.0, "launch_overhead_s": 2e-6}
    dev = invented_device(efficiency=eff)
    # 1e9 FLOPs at 4e12 · 0.8 · (1e9 / 2e9) = 1.6e12 FLOP/s → 0.625 ms, + 2 us launch
    assert op_seconds(1e9, 0, OpClass.MATMUL, dev, "bf16") == pytest.approx(1e9 / 1.6e12 + 2e-6)


def test_memory_leg_and_launch_for_zero_flop_op():
    dev = invented_device()
    assert op_seconds(0, 1e9, OpClass.MEMORY, dev) == pytest.approx(1e9 / 100e9)


def test_vector_ops_use_the_vector_rate_not_the_matrix_peak():
    dev = invented_device()  # fp32 1e12 is also the vector rate
    assert op_seconds(1e12, 0, OpClass.ELEMENTWISE, dev, "bf16") == pytest.approx(1.0)
    assert op_seconds(1e12, 0, OpClass.MATMUL, dev, "bf16") == pytest.approx(0.25)


def test_aligned_gemm_that_fills_the_waves_is_free():
    # 256 × 256 output in 128 × 128 tiles = 4 tiles on 4 slots; k = 64 is a multiple of 32
    assert alignment_factor(Gemm(256, 256, 64), 256, gpu()) == pytest.approx(1.0)


def test_k_misaligned_to_tile_pays_padding():
    # k = 40 pads to 64: useful 40/64 = 0.625 (the chapter's "align to 32" effect)
    assert alignment_factor(Gemm(256, 256, 40), 256, gpu()) == pytest.approx(40 / 64)


def test_partial_wave_idles_units():
    # 128 × 640 on 7 slots. Tile options (spec 128×128, halves, doubles):
    #   128×128: 5 tiles, 1 wave → 5/7;  64×128 or 128×64: 10 tiles, 2 waves → 10/14;
    #   64×64: 20 tiles, 3 waves → 20/21 (the best);  128×256: n pads to 768 → 0.83 · 3/7.
    f = alignment_factor(Gemm(128, 640, 64), 128, gpu(slots=7))
    assert f == pytest.approx(20 / 21)


def test_batch_16_vs_32_rows_small_gemm_efficiency():
    """Chapter §8.4.3: 'when batch size decreases from 32 to 16, GPU utilization often drops'."""
    eff = {"compute": {c.value: {"peak_fraction": 0.8, "half_flops": 5e7} for c in OpClass}}
    dev = invented_device(efficiency=eff)
    f16, f32 = 2 * 16 * 1024 * 1024, 2 * 32 * 1024 * 1024
    rate16 = f16 / op_seconds(f16, 0, OpClass.MATMUL, dev, "bf16")
    rate32 = f32 / op_seconds(f32, 0, OpClass.MATMUL, dev, "bf16")
    assert rate32 > rate16 * 1.2
