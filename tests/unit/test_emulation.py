"""A precision the device has no units for is refused unless emulation is asked for, and then stated."""

import pytest

import simtrain as st
from simtrain.cost.compute import matrix_peak_flops_per_s
from simtrain.glossary import DType

CFG = dict(global_batch_size=8, micro_batch_size=1, seq_len=128)


@pytest.mark.parametrize("device, precision", [("a100-sxm4-80gb", "fp8"), ("host-cpu", "fp8"),
                                               ("alveo-u280", "bf16")])
def test_missing_units_are_infeasible_with_the_listed_dtypes(device, precision):
    r = st.estimate("gpt2", device, dict(CFG, precision=precision))
    assert not r.feasible
    assert f"no {precision} matrix units" in r.reasons[0] and "emulate_precision=True" in r.reasons[0]


def test_emulated_fp8_runs_at_the_bf16_rate_and_says_so():
    r = st.estimate("gpt2", "a100-sxm4-80gb", dict(CFG, precision="fp8", emulate_precision=True))
    bf16_peak = matrix_peak_flops_per_s(st.load_device("a100-sxm4-80gb"), DType.BF16)
    assert r.feasible and r.peak_flops_per_s == bf16_peak == 312e12
    assert any("fp8 is emulated on a100-sxm4-80gb (upcast to bf16)" in w for w in r.warnings)


def test_fpga_bf16_emulation_upcasts_to_fp32():
    r = st.estimate("gpt2", "alveo-u280", dict(CFG, precision="bf16", emulate_precision=True))
    fp32 = st.load_device("alveo-u280").peak(DType.FP32)
    assert r.peak_flops_per_s == fp32
    assert any("upcast to fp32" in w for w in r.warnings)


def test_native_precision_has_no_emulation_warning():
    r = st.estimate("gpt2", "h100-sxm5-80gb", dict(CFG, precision="fp8", emulate_precision=True))
    assert r.peak_flops_per_s == st.load_device("h100-sxm5-80gb").peak(DType.FP8)
    assert not any("emulated" in w for w in r.warnings)


def test_cpu_16bit_at_fp32_rate_is_stated():
    r = st.estimate("gpt2", "host-cpu", dict(CFG, precision="fp16"))
    assert r.feasible and any("lists no fp16 peak" in w for w in r.warnings)
