"""The 2026 hardware (issue 40): B300, GB200 NVL72, H800, H100 PCIe / NVL, MI325X, MI355X, TPU v6e.

Every new file loads; headline numbers equal the datasheet values their sources print (dense = the
printed 2:4-sparse figure halved; NVIDIA's 8-GPU board totals divided by 8); the GB200 NVL72 rack is
one 72-GPU NVLink domain; llama3-8b runs on one node of every new GPU cluster with a finite step.
"""

from __future__ import annotations

import math

import pytest

import simtrain as st
from simtrain.glossary import Mark
from simtrain.specs.base import iter_sourced

GB, GIB, T = 1e9, 2.0**30, 1e12

DEVICES = ["b300", "gb200", "h800", "h100-pcie-80gb", "h100-nvl-94gb", "mi325x", "mi355x", "tpu-v6e"]
LINKS = ["nvlink-c2c", "tpu-v6e-ici", "infinity-fabric-mi355x"]
NODES = ["gb200-nvl72", "dgx-b300", "hgx-h800", "h100-pcie", "mi325x-8", "mi355x-8", "tpu-v6e-host"]
CLUSTERS = ["gb200-nvl72", "dgx-b300", "hgx-h800", "h100-pcie", "mi325x-8", "mi355x-8", "tpu-v6e-pod"]
GPU_CLUSTERS = [c for c in CLUSTERS if c != "tpu-v6e-pod"]


@pytest.mark.parametrize("kind, name", [("device", n) for n in DEVICES] + [("link", n) for n in LINKS]
                         + [("node", n) for n in NODES] + [("cluster", n) for n in CLUSTERS])
def test_new_file_loads_and_every_number_has_a_mark(kind, name):
    spec = getattr(st, f"load_{kind}")(name)
    assert spec.name == name
    for _, s in iter_sourced(spec, into_refs=False):
        assert s.mark in set(Mark) and len(s.source) >= 2


@pytest.mark.parametrize("name, dtype, dense_tflops", [
    # NV-HGX-B300: 8-GPU sparse totals 36 PF bf16, 72 PF fp8, 600 TF fp32, 10 TF fp64 -> / 8, / 2 (GLK-B300)
    ("b300", "bf16", 36e3 / 8 / 2), ("b300", "fp8", 72e3 / 8 / 2), ("b300", "fp32", 600 / 8), ("b300", "fp64", 10 / 8),
    # hardware.md 1a, "B200 (in GB200, 1200 W)": 2500 bf16, 5000 fp8; NVL72 360 PF bf16 sparse / 72 / 2
    ("gb200", "bf16", 360e3 / 72 / 2), ("gb200", "fp8", 5000), ("gb200", "fp64", 45),
    # H800: H100 SXM's tensor rates (1,979 sparse), FP64 cut to 1 TF
    ("h800", "bf16", 1979 / 2), ("h800", "fp64", 1),
    # HPCT-H100, PCIe column: 1,513* bf16, 3,026* fp8, 51 fp32
    ("h100-pcie-80gb", "bf16", 1513 / 2), ("h100-pcie-80gb", "fp8", 3026 / 2), ("h100-pcie-80gb", "fp32", 51),
    # NV-H100-NVL: 1,671* bf16, 3,341* fp8
    ("h100-nvl-94gb", "bf16", 1671 / 2), ("h100-nvl-94gb", "fp8", 3341 / 2),
    # AMD-MI325X: the MI300X compute die, 1307.4 bf16 (2614.9 sparse), 2614.9 fp8
    ("mi325x", "bf16", 2614.9 / 2), ("mi325x", "fp8", 2614.9),
    # AMD-MI355X (ISSCC): 256 CU x 8192 FP8 FLOP/clk x 2.4 GHz = 5033 TF, bf16 at half ("2.5 PF")
    ("mi355x", "fp8", 256 * 8192 * 2.4e9 / T), ("mi355x", "bf16", 256 * 4096 * 2.4e9 / T),
    # GCP-V6E: 918 TF bf16, 1836 TOPS int8
    ("tpu-v6e", "bf16", 918), ("tpu-v6e", "int8", 1836),
])
def test_dense_peaks_equal_the_datasheets(name, dtype, dense_tflops):
    assert st.load_device(name).peak(dtype) == pytest.approx(dense_tflops * T, rel=1e-3)


def test_no_fp4_and_the_dropped_paths_stay_absent():
    # B300 int8 is left out (sources conflict); MI355X has no TF32 matrix path; TPU v6e lists bf16 / int8 only
    assert st.load_device("b300").peak("int8") is None
    assert st.load_device("mi355x").peak("tf32") is None
    assert st.load_device("tpu-v6e").peak("fp8") is None


@pytest.mark.parametrize("name, nominal_gib, usable_gib, bandwidth", [
    ("b300", 288, 270, 8e12),            # GLK-B300 288 GB (8 x 12-high); VERDA-B300 270 GB exposed
    ("gb200", 192, 186, 8e12),           # 192 GB physical; NV-GB200-NVL72 13.4 TB / 72 = 186 GB usable
    ("h800", 80, 80, 3.35e12),
    ("h100-pcie-80gb", 80, 80, 2.0e12),  # HBM2e, 2000 GB/s (HPCT-H100)
    ("h100-nvl-94gb", 94, 94, 3.938e12),
    ("mi325x", 256, 256, 6e12),
    ("mi355x", 288, 288, 8e12),
    ("tpu-v6e", 32, 32, 1638e9),
])
def test_hbm_capacity_and_bandwidth(name, nominal_gib, usable_gib, bandwidth):
    d = st.load_device(name)
    assert d.memory_capacity_bytes == nominal_gib * GIB
    assert d.usable_memory_bytes == usable_gib * GIB
    assert d.memory_bandwidth_bytes_per_s == pytest.approx(bandwidth)


def test_derived_peaks_match_within_one_percent():
    # H800 is the H100 SXM die: 132 x 4 x 512 x 2 x 1.83 GHz = 989.4 TF; MI325X the MI300X die at 2.1 GHz;
    # MI355X 256 CU x 2048 bf16 FMA/clk x 2 x 2.4 GHz = 2516.6 TF
    for name in ("h800", "mi325x", "mi355x"):
        d = st.load_device(name)
        for dtype in d.matrix_unit.fma_per_clock_per_unit:
            assert d.matrix_unit.derived_peak_flops_per_s(dtype) == pytest.approx(d.peak(dtype), rel=0.01), (name, dtype)


def test_link_bandwidths_per_gpu():
    # NVLink 5, 18 links x 100 GB/s = 1.8 TB/s bidirectional = 900 GB/s per direction (B300, GB200)
    assert st.load_node("dgx-b300").fabric.per_device_bytes_per_s == 900 * GB
    assert st.load_node("gb200-nvl72").fabric.per_device_bytes_per_s == 900 * GB
    # H800: 400 GB/s bidirectional = 200 GB/s per direction (H100: 450)
    assert st.load_node("hgx-h800").fabric.per_device_bytes_per_s == 200 * GB
    # H100 PCIe: no NVLink; one Gen5 x16 link per card, 63 GB/s per direction
    pcie = st.load_node("h100-pcie").fabric
    assert (pcie.topology, pcie.link.name, pcie.per_device_bytes_per_s) == ("pcie_tree", "pcie-gen5-x16", 63 * GB)
    # MI325X: MI300X's 7 x 128 / 2 = 448 GB/s; MI355X: 7 x 153.6 / 2 = 537.6 GB/s, full mesh
    assert st.load_node("mi325x-8").fabric.per_device_bytes_per_s == 448 * GB
    assert st.load_node("mi355x-8").fabric.per_device_bytes_per_s == pytest.approx(537.6 * GB)
    # TPU v6e: 4 ports x 100 GB/s x 2 = 800 GB/s bidirectional per chip (GCP-V6E)
    assert 4 * st.load_link("tpu-v6e-ici").per_direction_bytes_per_s * 2 == 800 * GB
    # B300 scale-out: 8 x 800 Gb/s = 800 GB/s per direction per node (NV-HGX-B300 "1.6 TB/s")
    assert st.load_cluster("dgx-b300").network.per_node_bytes_per_s * 2 == 1.6e12


def test_gb200_nvl72_is_one_72_gpu_nvlink_domain():
    c = st.load_cluster("gb200-nvl72")
    node = c.node
    assert node.devices_count == 72 and node.device.name == "gb200"
    assert (node.fabric.topology, node.fabric.link.name, node.fabric.links_per_device) == ("nvswitch", "nvlink5", 18)
    # 72 x 1.8 TB/s = 129.6 TB/s, NVIDIA's "130 TB/s" NVLink bandwidth per rack
    assert 72 * node.fabric.per_device_bytes_per_s * 2 == pytest.approx(130e12, rel=0.01)
    # one ConnectX-7 400G per GPU: 72 NICs per rack
    assert (c.network.nics_per_node, c.network.nic_link.name) == (72, "ib-ndr")
    assert st.load_cluster("gb200-nvl72", nodes=2).devices_count == 144


def test_gb200_nvl72_keeps_data_parallel_traffic_on_nvlink():
    """72-way data parallelism inside one rack runs its gradient all-reduce over NVLink; the same 72
    GPUs as nine 8-GPU DGX B200 nodes cross InfiniBand and take longer for the same bytes."""
    model = st.load_model("llama3-8b")
    cfg = st.TrainConfig(global_batch_size=72, micro_batch_size=1, seq_len=4096, tp=1, zero_stage=1)
    rack = st.estimate(model, st.load_cluster("gb200-nvl72", nodes=1), cfg)
    dgx = st.estimate(model, st.load_cluster("dgx-b200", nodes=9), cfg)
    (rack_dp,), (dgx_dp,) = rack.comm, dgx.comm
    assert rack_dp.axis == dgx_dp.axis == "dp" and rack_dp.bytes_per_rank == dgx_dp.bytes_per_rank
    assert rack_dp.total_s < dgx_dp.total_s
    # NVLink-bound: all-reduce bytes per rank over 900 GB/s per direction cannot take less than this
    assert rack_dp.total_s >= rack_dp.bytes_per_rank / (900 * GB)


def test_tpu_v6e_pod_figures():
    pod = st.load_cluster("tpu-v6e-pod")
    assert pod.devices_count == 256 and pod.network.torus_dims == [16, 16]
    # 256 x 918 TF = 235.0 PF vs the documented 234.9 PF
    assert pod.devices_count * pod.device.peak("bf16") == pytest.approx(234.9e15, rel=0.01)
    assert st.load_cluster("tpu-v6e-pod", nodes=16).network.torus_dims == [16, 8]


@pytest.mark.parametrize("name", GPU_CLUSTERS + ["tpu-v6e-pod"])
def test_llama3_8b_runs_on_one_node(name):
    cluster = st.load_cluster(name, nodes=1)
    batch = 72 if cluster.devices_count == 72 else 64
    cfg = st.TrainConfig(global_batch_size=batch, micro_batch_size=1, seq_len=4096, tp=8, zero_stage=1)
    r = st.estimate(st.load_model("llama3-8b"), cluster, cfg)
    assert r.feasible, r.reasons
    assert math.isfinite(r.step_time_s) and r.step_time_s > 0
    assert 0 < r.mfu < 1
    assert r.memory.fits
