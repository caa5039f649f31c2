"""FP4 and MXFP8 training precisions (issue 40): priced at the device's fp4 / fp8 tensor-core peak where
it has one, refused with the emulation hint where it has not."""

import pytest

import simtrain as st
from simtrain.cost.compute import matrix_peak_flops_per_s
from simtrain.cost.precision import regime
from simtrain.glossary import DTYPE_BYTES, DType

CFG = {"global_batch_size": 64, "seq_len": 4096, "tp": 8, "recompute": "full", "zero_stage": 1}


def test_regimes_keep_bf16_copies_and_fp32_state():
    fp4, mx = regime("fp4"), regime("mxfp8")
    assert fp4.matmul_dtype is DType.FP4 and mx.matmul_dtype is DType.FP8
    assert (fp4.act_bytes, fp4.weight_bytes, fp4.master_bytes) == (2, 2, 4) == (mx.act_bytes, mx.weight_bytes,
                                                                            mx.master_bytes)
    assert DTYPE_BYTES[DType.FP4] == 0.5


def test_b200_prices_fp4_at_its_fp4_peak_and_mxfp8_as_fp8():
    b200 = st.load_device("b200")
    assert matrix_peak_flops_per_s(b200, DType.FP4) == pytest.approx(9000e12)
    cluster = st.load_cluster("dgx-b200", nodes=1)
    steps = {p: st.estimate("llama3-70b", cluster, {**CFG, "precision": p}) for p in ("bf16", "fp8", "mxfp8", "fp4")}
    assert all(r.feasible for r in steps.values())
    assert steps["mxfp8"].step_time_s == pytest.approx(steps["fp8"].step_time_s)
    assert steps["fp4"].step_time_s < steps["fp8"].step_time_s < steps["bf16"].step_time_s
    assert steps["fp4"].peak_flops_per_s == pytest.approx(9000e12)


def test_a_device_without_fp4_units_says_how_to_emulate():
    r = st.estimate("gpt2", st.load_cluster("dgx-h100", nodes=1), {"global_batch_size": 8, "precision": "fp4"})
    assert not r.feasible and "no fp4 matrix units" in r.reasons[0] and "emulate_precision" in r.reasons[0]
