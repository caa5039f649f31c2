"""Sustained compute ceilings, derived by hand: a matmul ceiling per dtype (fp8 below bf16's share of
its peak) and a board power limit that lowers every compute peak by the cube law."""

from __future__ import annotations

from pathlib import Path

import pytest

import simtrain as st
from simtrain.calibrate.runs import scaled_efficiency
from simtrain.cost.compute import (
    attention_kernel_seconds,
    compute_seconds,
    device_efficiency,
    memory_seconds,
    power_clock_fraction,
)
from simtrain.cost.emulation import emulated_cluster
from simtrain.errors import SpecError
from simtrain.glossary import DType, OpClass
from simtrain.specs.efficiency import AttentionKernel, ComputeCurve, Efficiency

H100_BF16, H100_FP8 = 989.4e12, 1978.9e12  # hardware_specs/devices/h100-sxm5-80gb.yaml
HALF_RANGE_CLOCK = 0.5 ** (1 / 3)  # 0.7937...: half the dynamic power (tdp − idle) at the cube law
H100_YAML = Path(__file__).resolve().parents[2] / "hardware_specs" / "devices" / "h100-sxm5-80gb.yaml"


def _h100():
    return st.load_device("h100-sxm5-80gb")


def _flat_eff(dev, half_flops: float = 0.0, **update) -> Efficiency:
    """The H100 profile with flat matmul / conv curves (ceiling 0.8, no ramps unless ``half_flops``)."""
    curves = {**dev.efficiency.compute, OpClass.MATMUL: ComputeCurve(peak_fraction=0.8, half_flops=half_flops),
              OpClass.CONV: ComputeCurve(peak_fraction=0.8, half_flops=half_flops)}
    return dev.efficiency.model_copy(update={"compute": curves, "sustained_clock_fraction": 1.0,
                                             "dtype_peak_fraction": {}, **update})


# --- 1. a matmul ceiling per dtype -------------------------------------------------------------
def test_fp8_matmul_runs_at_its_own_ceiling():
    dev = _h100()
    eff = _flat_eff(dev, dtype_peak_fraction={DType.FP8: 0.625})
    # no GEMM geometry: no tile padding, no rows / depth ramps, no fixed cost
    bf16 = compute_seconds(1e12, OpClass.MATMUL, dev, DType.BF16, eff)
    fp8 = compute_seconds(1e12, OpClass.MATMUL, dev, DType.FP8, eff)
    assert bf16 == pytest.approx(1e12 / (989.4e12 * 0.8))  # 1.2634 ms at the curve's ceiling
    assert fp8 == pytest.approx(1e12 / (1978.9e12 * 0.625))  # 0.8085 ms (1,236.8 TFLOP/s), not 0.6317 ms
    without = compute_seconds(1e12, OpClass.MATMUL, dev, DType.FP8, _flat_eff(dev))
    assert without == pytest.approx(1e12 / (1978.9e12 * 0.8))


def test_dtype_ceiling_also_prices_the_fixed_cost():
    dev = _h100()
    eff = _flat_eff(dev, half_flops=1e10, dtype_peak_fraction={DType.FP8: 0.625})
    t = compute_seconds(1e12, OpClass.MATMUL, dev, DType.FP8, eff)
    assert t == pytest.approx((1e12 + 1e10) / (H100_FP8 * 0.625))


def test_dtype_ceiling_is_for_matmuls_only():
    dev = _h100()
    eff = _flat_eff(dev, dtype_peak_fraction={DType.FP8: 0.625})
    conv = compute_seconds(1e12, OpClass.CONV, dev, DType.FP8, eff)
    assert conv == pytest.approx(1e12 / (H100_FP8 * 0.8))
    # and a dtype without an entry keeps the curve's ceiling
    assert compute_seconds(1e12, OpClass.MATMUL, dev, DType.BF16, eff) == pytest.approx(1e12 / (H100_BF16 * 0.8))


def test_an_emulated_dtype_keeps_the_curve_ceiling():
    """fp8 on an A100 runs upcast to bf16 (cost/emulation.py): bf16's ceiling, at bf16's peak."""
    base = st.load_cluster("dgx-a100-80gb", nodes=1)
    own = device_efficiency(base.device)
    eff = own.model_copy(update={"compute": {**own.compute, OpClass.MATMUL: ComputeCurve(peak_fraction=0.8)},
                                 "sustained_clock_fraction": 1.0, "dtype_peak_fraction": {DType.FP8: 0.5}})
    emulated = emulated_cluster(base, DType.FP8, True).device
    t = compute_seconds(1e12, OpClass.MATMUL, emulated, DType.FP8, eff)
    assert t == pytest.approx(1e12 / (312e12 * 0.8))


def test_unknown_dtype_key_is_an_error_naming_the_field():
    with pytest.raises(ValueError, match=r"dtype_peak_fraction\.fp6"):
        Efficiency.model_validate({"compute": {"matmul": {"peak_fraction": 0.8}},
                                   "dtype_peak_fraction": {"fp6": 0.5}})
    with pytest.raises(ValueError, match=r"dtype_peak_fraction\.fp8"):
        Efficiency.model_validate({"compute": {"matmul": {"peak_fraction": 0.8}},
                                   "dtype_peak_fraction": {"fp8": 1.2}})


def test_unknown_dtype_key_in_a_device_file_names_file_and_field(tmp_path):
    text = H100_YAML.read_text(encoding="utf-8")
    anchor = "  dtype_peak_fraction: {"
    assert anchor in text
    bad = tmp_path / "h100-bad.yaml"
    bad.write_text(text.replace(anchor, "  dtype_peak_fraction: {fp6: 0.6, ", 1), encoding="utf-8")
    with pytest.raises(SpecError) as err:
        st.load_device(str(bad))
    assert "h100-bad.yaml" in str(err.value) and "efficiency.dtype_peak_fraction.fp6" in str(err.value)


def test_calibration_factors_scale_the_dtype_ceilings_and_clip_them():
    eff = _flat_eff(_h100(), dtype_peak_fraction={DType.FP8: 0.5})
    assert scaled_efficiency(eff, {"compute": 1.2}).dtype_peak_fraction[DType.FP8] == pytest.approx(0.6)
    assert scaled_efficiency(eff, {"class:matmul": 1.5}).dtype_peak_fraction[DType.FP8] == pytest.approx(0.75)
    both = scaled_efficiency(eff, {"compute": 1.2, "class:matmul": 1.5})
    assert both.dtype_peak_fraction[DType.FP8] == pytest.approx(0.9)
    assert scaled_efficiency(eff, {"compute": 1.2, "class:matmul": 4.0}).dtype_peak_fraction[DType.FP8] == 1.0
    assert scaled_efficiency(eff, {"class:conv": 2.0}).dtype_peak_fraction[DType.FP8] == 0.5


# --- 2. a power limit --------------------------------------------------------------------------
def _limited(dev, watts: float):
    return dev.model_copy(update={"power_limit_w": type(dev.tdp_w)(value=watts, source="test", mark="U")})


def test_half_the_dynamic_range_is_the_cube_root_of_a_half():
    dev = _h100()  # tdp 700 W, idle 70 W: half the dynamic range is 70 + 315 = 385 W
    assert power_clock_fraction(dev) == 1.0
    assert power_clock_fraction(_limited(dev, 385.0)) == pytest.approx(HALF_RANGE_CLOCK)
    assert power_clock_fraction(_limited(dev, 700.0)) == 1.0
    # torchtitan's H100 tables: 500 W → ((500 − 70) / 630)^(1/3) = 0.8806
    assert power_clock_fraction(_limited(dev, 500.0)) == pytest.approx((430 / 630) ** (1 / 3))
    no_idle = _limited(dev.model_copy(update={"idle_power_w": None}), 350.0)  # idle taken as 0
    assert power_clock_fraction(no_idle) == pytest.approx(HALF_RANGE_CLOCK)


def test_power_limit_scales_compute_not_memory():
    dev = _h100()
    slow = _limited(dev, 385.0)
    eff = dev.efficiency
    for cls, dtype in ((OpClass.MATMUL, DType.BF16), (OpClass.MATMUL, DType.FP8), (OpClass.ELEMENTWISE, DType.FP32)):
        a = compute_seconds(1e12, cls, dev, dtype, eff)
        assert compute_seconds(1e12, cls, slow, dtype, eff) == pytest.approx(a / HALF_RANGE_CLOCK)
    kern = AttentionKernel(fw_peak_fraction=0.6, bw_peak_fraction=0.5)
    a = attention_kernel_seconds(1e12, "fw", 4096, True, kern, dev, DType.BF16, eff)
    assert a == pytest.approx(1e12 / (H100_BF16 * 0.6))
    assert attention_kernel_seconds(1e12, "fw", 4096, True, kern, slow, DType.BF16, eff) == \
        pytest.approx(a / HALF_RANGE_CLOCK)
    assert memory_seconds(1e9, slow, eff) == memory_seconds(1e9, dev, eff)


def test_power_limit_multiplies_the_sustained_clock():
    dev = _h100()
    eff = _flat_eff(dev, sustained_clock_fraction=0.9)
    t = compute_seconds(1e12, OpClass.MATMUL, _limited(dev, 385.0), DType.BF16, eff)
    assert t == pytest.approx(1e12 / (H100_BF16 * 0.8 * 0.9 * HALF_RANGE_CLOCK))


def test_power_limit_validation_names_the_field(tmp_path):
    cluster = st.load_cluster("dgx-h100", nodes=1)
    with pytest.raises(SpecError, match=r"node\.device\.power_limit_w: power_limit_w \(800 W\) exceeds tdp_w"):
        cluster.with_power_limit(800)
    with pytest.raises(SpecError, match=r"power_limit_w \(60 W\) must exceed idle_power_w \(70 W\)"):
        cluster.with_power_limit(60)
    with pytest.raises(SpecError, match=r"node\.device\.power_limit_w\.value"):
        cluster.with_power_limit(-5)
    no_tdp = st.Cluster.single(st.load_device("tpu-v5e"))  # its spec gives no TDP
    with pytest.raises(SpecError, match="power_limit_w needs tdp_w"):
        no_tdp.with_power_limit(150)
    text = H100_YAML.read_text(encoding="utf-8")
    bad = tmp_path / "h100-over.yaml"
    bad.write_text(text + "\npower_limit_w: {value: 750 W, source: test}\n", encoding="utf-8")
    with pytest.raises(SpecError, match=r"h100-over\.yaml.*power_limit_w \(750 W\) exceeds tdp_w"):
        st.load_device(str(bad))
    ok = tmp_path / "h100-500w.yaml"
    ok.write_text(text + "\npower_limit_w: {value: 500 W, source: torchtitan H100 runs}\n", encoding="utf-8")
    assert st.load_device(str(ok)).power_limit_w.value == 500.0


def test_with_power_limit_on_a_library_cluster():
    cluster = st.load_cluster("dgx-h100", nodes=1)
    limited = cluster.with_power_limit("500 W")
    assert limited.device.power_limit_w.value == 500.0 and cluster.device.power_limit_w is None
    assert limited.device.model_copy(update={"power_limit_w": None}) == cluster.device
    assert (limited.nodes_count, limited.network, limited.name) == (cluster.nodes_count, cluster.network, cluster.name)
    assert limited.with_nodes(2).device.power_limit_w.value == 500.0
    assert limited.with_power_limit(None).device == cluster.device


def test_a_lower_limit_makes_an_estimate_slower():
    model, cluster = st.load_model("llama2-7b"), st.load_cluster("dgx-h100", nodes=1)
    cfg = st.TrainConfig(global_batch_size=8, micro_batch_size=1, seq_len=1024, precision="bf16", tp=8)
    full = st.estimate(model, cluster, cfg)
    reports = [st.estimate(model, cluster.with_power_limit(w), cfg) for w in (600, 385)]
    assert full.step_time_s < reports[0].step_time_s < reports[1].step_time_s
    # compute slows by at most 1 / clock (memory-bound ops do not slow), and by more than half of it
    ratio = reports[1].time_breakdown_s["compute"] / full.time_breakdown_s["compute"]
    assert 1 + 0.5 * (1 / HALF_RANGE_CLOCK - 1) < ratio <= 1 / HALF_RANGE_CLOCK + 1e-12
    assert reports[1].peak_flops_per_s == full.peak_flops_per_s  # MFU stays against the datasheet peak


def test_vectorized_sweep_equals_scalar_under_a_power_limit():
    from simtrain.search.vector import estimate_points
    model = st.load_model("gpt2-medium")
    cluster = st.load_cluster("dgx-h100", nodes=1).with_power_limit(450)
    base = st.TrainConfig(global_batch_size=16, seq_len=1024)
    points = [{"tp": 2, "pp": 2, "micro_batch_size": 2, "zero_stage": 1}, {"tp": 8, "pp": 1, "micro_batch_size": 1, "zero_stage": 3}]
    df = estimate_points(model, cluster, base, points)
    for p, (_, row) in zip(points, df.iterrows(), strict=True):
        r = st.estimate(model, cluster, st.TrainConfig(**base.model_dump(exclude_unset=True), **p))
        assert (row.step_time_s, row.compute_s) == pytest.approx(
            (r.step_time_s, r.time_breakdown_s["compute"]), rel=1e-9)
    plain = estimate_points(model, st.load_cluster("dgx-h100", nodes=1), base, points)
    assert (df.step_time_s > plain.step_time_s).all()


def test_energy_uses_the_power_limit_as_the_full_load_draw():
    cfg = st.TrainConfig(global_batch_size=8, micro_batch_size=1, seq_len=1024, precision="bf16", tp=8)
    base = st.load_cluster("dgx-h100", nodes=1)
    full = st.estimate("llama2-7b", base, cfg)
    capped = st.estimate("llama2-7b", base.with_power_limit(500.0), cfg)
    assert full.tdp_w == 700.0 and capped.tdp_w == 500.0
    assert capped.energy_kwh(duration_s=3600) < full.energy_kwh(duration_s=3600)
