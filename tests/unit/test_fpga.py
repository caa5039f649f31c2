"""FPGA: peaks derived from DSPs, the on-chip BRAM/URAM tier, time-multiplexed vs layer-pipelined
execution, and batch-1 efficiency (simtrain/cost/fpga.py, hardware.md §6)."""

import pytest

import simtrain as st
from simtrain.cost.compute import device_efficiency, memory_seconds
from simtrain.cost.fpga import dataflow_fit, layer_pipeline, on_chip_tier
from simtrain.glossary import DType, Mark


def _pipelined(name):
    return st.load_device(name).model_copy(update={"execution": "layer_pipelined"})


def test_u280_peaks_by_hand():
    d = st.load_device("alveo-u280")
    # int8: the vendor figure (24.5 TOPS) and the DSP formula 9,024 x 2 MAC x 2 x 0.68 GHz agree
    assert d.peak(DType.INT8) == 24.5e12
    assert d.matrix_unit.derived_peak_flops_per_s(DType.INT8) == pytest.approx(9024 * 2 * 2 * 0.68e9, rel=1e-12)
    # fp32: no hard float in the DSP48E2: 2.5 DSPs per FMA at a 0.5 GHz design clock, derived (mark D)
    assert d.peak(DType.FP32) == pytest.approx(9024 * 0.4 * 2 * 0.5e9, rel=1e-12)
    assert d.peaks_flops_per_s[DType.FP32].mark is Mark.D
    assert d.peak(DType.BF16) is None  # no bf16 path: emulate_precision upcasts it (test_emulation.py)


def test_v80_peaks_by_hand():
    d = st.load_device("versal-v80")
    fp32 = 10848 * 1 * 2 * 0.75e9  # DSPFP32: one fp32 FMA per DSP58 per clock
    assert d.peak(DType.FP32) == pytest.approx(fp32, rel=1e-12)
    assert d.peak(DType.BF16) == d.peak(DType.FP32)  # bf16 operands widen exactly into the fp32 path
    assert d.peak(DType.INT8) == pytest.approx(10848 * 3 * 2 * 0.75e9, rel=1e-12)  # 3-element int8 dot product
    assert st.estimate("gpt2", "versal-v80", dict(global_batch_size=8, micro_batch_size=1, seq_len=128,
                                                  precision="bf16")).feasible


def test_on_chip_tier_capacity_by_hand():
    tier = on_chip_tier(st.load_device("alveo-u280"))
    assert tier.level == "sram" and tier.capacity_bytes.value == 2016 * 36 * 1024 // 8 + 960 * 288 * 1024 // 8


def test_layer_pipelined_streams_from_on_chip_memory():
    base, pipe = st.load_device("alveo-u280"), _pipelined("alveo-u280")
    nbytes = 1e9
    eff = device_efficiency(base)
    assert memory_seconds(nbytes, base, eff) == pytest.approx(nbytes * (nbytes + 1e6) / nbytes / (460e9 * 0.56))
    assert memory_seconds(nbytes, pipe, device_efficiency(pipe)) == pytest.approx(nbytes / (26.8e12 * 0.56))
    flow = device_efficiency(pipe)
    assert flow.launch_overhead_s == 0 and all(c.half_flops == 0 for c in flow.compute.values())


def test_execution_only_on_fpgas():
    with pytest.raises(ValueError, match="FPGA design choice"):
        st.Device.model_validate({**st.load_device("h100-sxm5-80gb").model_dump(), "execution": "layer_pipelined"})


@pytest.mark.parametrize("name, model, precision", [("alveo-u280", "mobilenet-v1", "fp32"),
                                                    ("versal-v80", "resnet18", "bf16")])
def test_dataflow_keeps_efficiency_at_batch_one_time_multiplexing_does_not(name, model, precision):
    def mfu(device, mb):
        cfg = dict(global_batch_size=32, micro_batch_size=mb, seq_len=None, precision=precision)
        r = st.estimate(model, st.Cluster.single(device), cfg)
        assert r.feasible, r.reasons
        return r.mfu
    pipe, mux = _pipelined(name), st.load_device(name)
    assert mfu(pipe, 1) == pytest.approx(mfu(pipe, 32), rel=1e-9)
    assert mfu(mux, 1) < 0.5 * mfu(mux, 32)
    assert mfu(pipe, 1) > mfu(mux, 32)  # resident weights, no launches, no ramp


def test_gpu_loses_efficiency_at_batch_one():
    cfg = dict(global_batch_size=32, seq_len=None, precision="bf16")
    one = st.estimate("resnet18", "h100-sxm5-80gb", dict(cfg, micro_batch_size=1)).mfu
    many = st.estimate("resnet18", "h100-sxm5-80gb", dict(cfg, micro_batch_size=32)).mfu
    assert one < 0.1 * many


def test_weights_that_do_not_fit_on_chip_are_infeasible():
    cfg = dict(global_batch_size=32, micro_batch_size=1, seq_len=None, precision="fp32")
    r = st.estimate("resnet18", st.Cluster.single(_pipelined("alveo-u280")), cfg)
    fit = dataflow_fit(st.load_model("resnet18").param_count, 4, st.load_device("alveo-u280"))
    assert not fit.fits and not r.feasible and "BRAM/URAM" in r.reasons[0]
    assert st.estimate("resnet18", "alveo-u280", cfg).feasible  # time-multiplexed streams from HBM


def test_layer_pipeline_by_hand():
    d = _pipelined("alveo-u280")
    dsps = d.matrix_unit.units_count.value
    plan = layer_pipeline([1e9, 3e9], d, DType.INT8, samples=10)
    assert plan.dsps == (dsps // 4, dsps * 3 // 4)
    per_dsp = 24.5e12 / dsps * 0.70
    assert plan.interval_s == pytest.approx(3e9 / (dsps * 3 // 4 * per_dsp))
    # steady state = whole work at the ceiling; fill adds one interval per extra stage
    assert plan.interval_s == pytest.approx(4e9 / (24.5e12 * 0.70))
    assert plan.seconds == pytest.approx(11 * plan.interval_s)


def test_notes_say_how_the_fpga_runs():
    cfg = dict(global_batch_size=8, micro_batch_size=1, seq_len=None, precision="fp32")
    r = st.estimate("mobilenet-v1", "alveo-u280", cfg)
    assert any("runs time-multiplexed" in w for w in r.warnings)
    r = st.estimate("mobilenet-v1", st.Cluster.single(_pipelined("alveo-u280")), cfg)
    assert any("runs layer-pipelined" in w and "BRAM" not in w for w in r.warnings)
