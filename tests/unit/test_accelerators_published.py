"""Held-out published results on TPU, wafer-scale and FPGA hardware (docs/accelerators.md). Nothing is
fitted to these numbers; each tolerance is the honest error of the prediction, stated in the doc."""

from pathlib import Path

import pytest

import simtrain as st

PALM = Path(__file__).parent / "data" / "palm-540b.yaml"


@pytest.fixture(scope="module")
def palm():
    # PaLM's layout (Chowdhery et al. 2022 §4): 12-way model parallel x 256-way data parallel per pod,
    # weights sharded over the data axis (ZeRO-3-like), two pods data parallel over DCN, no pipeline,
    # rematerialisation; batch 2048 x 2048 tokens. micro-batch 2: the largest that fits in 32 GiB.
    cfg = dict(global_batch_size=2048, micro_batch_size=2, seq_len=2048, precision="bf16", tp=12, dp=512,
               pp=1, zero_stage=3, recompute="full", sequence_parallel=False)
    return st.estimate(st.load_model(PALM), st.load_cluster("tpu-v4-multislice"), cfg)


def test_palm_540b_mfu_on_6144_tpu_v4(palm):
    # published: 46.2 % MFU, 57.8 % HFU (Chowdhery et al. 2022, Table 3); predicted 40.7 % / 54.2 %
    assert palm.feasible
    assert palm.mfu == pytest.approx(0.462, rel=0.15)
    assert palm.hfu == pytest.approx(0.578, rel=0.10)
    assert palm.model_flops_per_step > 0 and st.load_model(PALM).param_count == pytest.approx(540.35e9, rel=1e-3)


def test_cerebras_16_cs3_speedup():
    # published: 16 CS-3 systems train a 1 T-parameter model 15.3x faster than one (Sandia, 4NOW-SNL,
    # hardware.md 7); predicted 16.0x (pure data parallelism, gradient reduce in SwarmX hidden)
    model = st.load_model("megatron-1t")
    cfg = dict(global_batch_size=1024, micro_batch_size=16, seq_len=2048, recompute="full")
    one = st.estimate(model, st.load_cluster("cs-3-cluster", nodes=1), cfg).step_time_s
    sixteen = st.estimate(model, st.load_cluster("cs-3-cluster", nodes=16), cfg).step_time_s
    assert one / sixteen == pytest.approx(15.3, rel=0.05)


def test_u280_dpu_peak_fits_the_dsp_formula():
    # published: Vitis-AI DPUCAHX8H on U280, 3 cores at 300 MHz, 17,203 GOPS peak (AMD PG367 Table 1).
    # The DPU double-pumps its DSPs (600 MHz); the DSP formula at that clock bounds it from above:
    u280 = st.load_device("alveo-u280")
    bound = u280.matrix_unit.units_count.value * u280.matrix_unit.fma_per_clock_per_unit["int8"] * 2 * 0.6e9
    assert 17.203e12 <= bound
    assert 17.203e12 / bound == pytest.approx(0.794, abs=0.001)  # the DPU uses ~79 % of the DSPs
    # and the library's int8 peak (24.5 TOPS at 0.68 GHz) sits above the DPU's design peak
    assert 17.203e12 / u280.peak("int8") == pytest.approx(0.702, abs=0.001)
