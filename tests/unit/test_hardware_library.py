"""The hardware library: every file loads, every number is cited, derivable peaks match their
datasheets, and the unit conventions (per direction vs bidirectional, GB vs GiB) hold.

Expected numbers are hand-derived from shared/reference/hardware.md; the derivation is in each test.
"""

from __future__ import annotations

import math
import re
from collections import Counter

import pytest
import yaml

import simtrain as st
from simtrain.glossary import DeviceKind, DType, Mark, OpClass
from simtrain.specs.base import iter_sourced
from simtrain.specs.library import HARDWARE_DIR, library_names, load_efficiency_default

REQUIRED = {
    "device": ["v100-sxm2-32gb", "a100-sxm4-40gb", "a100-sxm4-80gb", "h100-sxm5-80gb", "h200-sxm-141gb", "b200",
               "mi300x", "tpu-v4", "tpu-v5e", "tpu-v5p", "gaudi3", "trainium2", "alveo-u280", "versal-v80",
               "wse-2", "wse-3", "host-cpu"],
    "link": ["nvlink3", "nvlink4", "nvlink5", "nvswitch", "pcie-gen4-x16", "pcie-gen5-x16", "ib-hdr", "ib-ndr",
             "ib-xdr", "roce-400gbe", "tpu-ici", "swarmx"],
    "cluster": ["dgx-a100-40gb", "dgx-a100-80gb", "dgx-h100", "hgx-h200", "dgx-b200", "tpu-v4-pod", "tpu-v5p-pod",
                "cs-3-cluster"],
}
KINDS = ("device", "link", "node", "cluster")
ALL_ITEMS = [(k, n) for k in KINDS for n in library_names(k)]
#: devices whose datasheet peak is derivable from matrix-unit inputs (hardware.md 1a, 2, 3, 6)
DERIVABLE = ["v100-sxm2-32gb", "a100-sxm4-40gb", "a100-sxm4-80gb", "h100-sxm5-80gb", "h200-sxm-141gb", "mi300x",
             "tpu-v4", "tpu-v5e", "tpu-v5p", "alveo-u280", "versal-v80", "wse-2", "wse-3", "host-cpu"]
GB, GIB = 1e9, 2.0**30


def _load(kind: str, name: str):
    return getattr(st, f"load_{kind}")(name)


def _source_keys() -> set[str]:
    return set(yaml.safe_load((HARDWARE_DIR / "sources.yaml").read_text())["sources"])


def test_required_names_exist():
    for kind, names in REQUIRED.items():
        missing = sorted(set(names) - set(library_names(kind)))
        assert not missing, f"{kind}s missing from hardware_specs: {missing}"


@pytest.mark.parametrize("kind, name", ALL_ITEMS, ids=[f"{k}:{n}" for k, n in ALL_ITEMS])
def test_every_file_loads_and_is_named_after_its_file(kind, name):
    spec = _load(kind, name)
    assert spec.name == name


def _all_numbers():
    for kind, name in ALL_ITEMS:
        for path, s in iter_sourced(_load(kind, name), into_refs=False):
            yield f"{kind}:{name}:{path}", s


def test_every_number_cites_a_reference_key_or_says_where_it_came_from():
    keys = _source_keys()
    token = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]*[A-Za-z0-9]")
    bad = []
    for where, s in _all_numbers():
        cited = keys & set(token.findall(s.source))
        if s.mark is Mark.U:
            ok = cited or "not in reference" in s.source
        else:
            ok = bool(cited)  # V, V2 and D must name the reference source they rest on
        if not ok:
            bad.append(f"{where} [{s.mark}] {s.source!r}")
    assert not bad, "numbers without a usable source:\n" + "\n".join(bad)


def test_count_of_numbers_by_mark(capsys):
    counts = Counter(s.mark for _, s in _all_numbers())
    total = sum(counts.values())
    with capsys.disabled():
        print(f"\nhardware library numbers: {total} ({', '.join(f'{m.value} {counts[m]}' for m in Mark)})")
    # the library is mostly sourced: at least a third of its numbers are backed by a V / V2 source
    assert counts[Mark.V] + counts[Mark.V2] >= total / 3
    # the simtrain specs list footer counts the same numbers
    from simtrain.cli.specs import library_tables
    assert f"{total} numbers by mark: V {counts[Mark.V]}, V2 {counts[Mark.V2]}" in library_tables()


@pytest.mark.parametrize("name", DERIVABLE)
def test_derived_peak_matches_datasheet_within_one_percent(name):
    device = st.load_device(name)
    unit = device.matrix_unit
    assert unit is not None, f"{name} should give matrix-unit inputs"
    assert unit.fma_per_clock_per_unit, name
    for dtype in unit.fma_per_clock_per_unit:
        sheet = device.peak(dtype)
        assert sheet is not None, f"{name}: matrix unit lists {dtype} but the datasheet peaks do not"
        derived = unit.units_count.value * unit.fma_per_clock_per_unit[dtype] * 2 * unit.clock_for(dtype)
        assert derived == unit.derived_peak_flops_per_s(dtype)
        assert derived == pytest.approx(sheet, rel=0.01), f"{name} {dtype}"


def test_derivations_by_hand():
    # hardware.md 1a: A100 108 SM x 4 TC x 256 FMA/clk x 2 x 1.41 GHz = 311.87 TFLOP/s
    a100 = st.load_device("a100-sxm4-80gb").matrix_unit
    assert a100.derived_peak_flops_per_s(DType.BF16) == pytest.approx(311.86944e12, rel=1e-12)
    # hardware.md 1a: H100 132 x 4 x 512 x 2 x 1.83 GHz = 989.43 TFLOP/s
    h100 = st.load_device("h100-sxm5-80gb").matrix_unit
    assert h100.derived_peak_flops_per_s(DType.BF16) == pytest.approx(989.42976e12, rel=1e-12)
    # hardware.md 2: MI300X 304 CU x 1024 x 2 x 2.1 GHz = 1307.44 TFLOP/s
    mi = st.load_device("mi300x").matrix_unit
    assert mi.derived_peak_flops_per_s(DType.FP16) == pytest.approx(1307.4432e12, rel=1e-12)
    # hardware.md 6: U280 9024 DSP x 2 int8 MAC x 2 x 0.68 GHz = 24.545 TOPS
    u280 = st.load_device("alveo-u280").matrix_unit
    assert u280.derived_peak_flops_per_s(DType.INT8) == pytest.approx(24.54528e12, rel=1e-12)


def test_dense_peaks_are_not_sparse_figures():
    # the datasheets print 2:4-sparse peaks at twice the dense value; the library holds the dense ones
    assert st.load_device("h100-sxm5-80gb").peak("fp8") == pytest.approx(3958e12 / 2, rel=1e-3)
    assert st.load_device("b200").peak("bf16") == pytest.approx(4500e12 / 2)
    assert st.load_device("mi300x").peak("bf16") == pytest.approx(2614.9e12 / 2, rel=1e-4)
    # WSE-3: the marketed 125 PF is not dense; the dense derivation is 900,000 x 8 x 2 x 1.1 GHz
    assert st.load_device("wse-3").peak("fp16") == pytest.approx(900_000 * 8 * 2 * 1.1e9)


def test_per_direction_and_bidirectional_conversions():
    # NVLink4: 18 links x 50 GB/s bidirectional = 900 GB/s per GPU = 450 GB/s per direction
    nvlink4 = st.load_link("nvlink4")
    assert nvlink4.per_direction_bytes_per_s == 25 * GB
    assert st.load_node("dgx-h100").fabric.per_device_bytes_per_s == 450 * GB
    assert st.load_node("hgx-h200").fabric.per_device_bytes_per_s == 450 * GB
    # an NVSwitch gen-3 port carries one NVLink4 link: 18 ports x 25 GB/s = the same 450 GB/s
    assert st.load_link("nvswitch").per_direction_bytes_per_s * 18 == 450 * GB
    # NVLink3: 12 x 50 / 2 = 300 GB/s per direction; NVLink5: 18 x 100 / 2 = 900; NVLink2: 6 x 50 / 2 = 150
    assert st.load_node("dgx-a100-80gb").fabric.per_device_bytes_per_s == 300 * GB
    assert st.load_node("dgx-b200").fabric.per_device_bytes_per_s == 900 * GB
    assert st.load_link("nvlink2").per_direction_bytes_per_s * 6 == 150 * GB
    # network ports are quoted in bits per direction: 200 / 400 / 800 Gb/s = 25 / 50 / 100 GB/s
    assert st.load_link("ib-hdr").per_direction_bytes_per_s == 25 * GB
    assert st.load_link("ib-ndr").per_direction_bytes_per_s == 50 * GB
    assert st.load_link("ib-xdr").per_direction_bytes_per_s == 100 * GB
    assert st.load_link("roce-400gbe").per_direction_bytes_per_s == 50 * GB
    # DGX H100: 8 x 400G = 3.2 Tb/s = 400 GB/s per node per direction (hardware.md 8c)
    assert st.load_cluster("dgx-h100").network.per_node_bytes_per_s == 400 * GB
    # PCIe x16 per direction: Gen4 31.5, Gen5 63 GB/s (the "128 GB/s" H100 figure is bidirectional)
    assert st.load_link("pcie-gen5-x16").per_direction_bytes_per_s * 2 == pytest.approx(126 * GB)
    # TPU v5p: 6 links x 100 GB/s x 2 directions = 1200 GB/s bidirectional per chip (GCP-V5P)
    assert 6 * st.load_link("tpu-v5p-ici").per_direction_bytes_per_s * 2 == 1200 * GB
    # TPU v5e: 4 ports x 50 x 2 = 400 GB/s bidirectional per chip (GCP-V5E)
    assert 4 * st.load_link("tpu-v5e-ici").per_direction_bytes_per_s * 2 == 400 * GB
    # MI300X: 7 Infinity Fabric links x 128 / 2 = 448 GB/s per direction (896 aggregate bidirectional)
    assert st.load_node("mi300x-8").fabric.per_device_bytes_per_s == 448 * GB
    # Cerebras system I/O: 12 x 100 GbE = 1.2 Tb/s = 150 GB/s
    assert st.load_link("swarmx").per_direction_bytes_per_s == 150 * GB
    assert st.load_device("wse-3").memory_external.bandwidth_bytes_per_s.value == 150 * GB


def test_gb_and_gib_as_the_reference_says():
    assert st.load_device("tpu-v4").memory_capacity_bytes == 32 * GIB           # "32 GiB HBM2"
    assert st.load_device("trainium2").memory_capacity_bytes == 96 * GIB        # "96 GiB"
    a100 = st.load_device("a100-sxm4-40gb")
    assert a100.usable_memory_bytes == 42_405_855_232                            # deviceQuery, 39.5 GiB
    assert a100.memory[0].capacity_bytes.value == 41_943_040                      # L2 40 MiB
    # TPU v5p: 2765 GB/s = 2575 GiB/s (hardware.md 11.3: consistent)
    assert st.load_device("tpu-v5p").memory_bandwidth_bytes_per_s / GIB == pytest.approx(2575, rel=1e-3)
    # B200: 192 physical, 180 exposed
    b200 = st.load_device("b200")
    assert (b200.memory_capacity_bytes, b200.usable_memory_bytes) == (192 * GIB, 180 * GIB)
    # WSE-3: 900,000 cores x 48 KiB = 44.2e9 B, the decimal "44 GB"
    assert st.load_device("wse-3").memory_capacity_bytes == pytest.approx(900_000 * 48 * 1024, rel=0.01)
    # U280 HBM: 32 pseudo-channels x 256 MiB and x 14.375 GB/s (AMD-UG1393)
    u280 = st.load_device("alveo-u280")
    assert u280.memory_capacity_bytes == 32 * 256 * 2**20
    assert u280.memory_bandwidth_bytes_per_s == pytest.approx(32 * 14.375 * GB)


def test_pod_level_figures():
    # TPU v4 pod: 4096 chips x 275 TF = 1.126 EF ("1.1 EF peak", GCP-V4)
    v4 = st.load_cluster("tpu-v4-pod")
    assert v4.devices_count == 4096
    assert v4.devices_count * v4.device.peak("bf16") == pytest.approx(1.1e18, rel=0.03)
    # TPU v5e pod: 256 x 197 TF = 50.43 PF vs the documented 50.63 PF
    v5e = st.load_cluster("tpu-v5e-pod")
    assert v5e.devices_count * v5e.device.peak("bf16") == pytest.approx(50.63e15, rel=0.01)
    # TPU v5p pod: 16 x 20 x 28 = 8960 chips
    assert st.load_cluster("tpu-v5p-pod").devices_count == 16 * 20 * 28


CLUSTERS = library_names("cluster")


@pytest.mark.parametrize("name", CLUSTERS)
@pytest.mark.parametrize("nodes", [1, 2, 4])
def test_every_cluster_loads_with_nodes(name, nodes):
    base = st.load_cluster(name)
    c = st.load_cluster(name, nodes=nodes)
    assert c.nodes_count == nodes
    assert c.devices_count == nodes * base.node.devices_count
    assert c.node == base.node and c.network.nic_link == base.network.nic_link
    if base.network.torus_dims:
        assert len(c.network.torus_dims) == len(base.network.torus_dims)
        assert math.prod(c.network.torus_dims) == c.devices_count


@pytest.mark.parametrize("name, nodes, dims", [
    # the most balanced factorisation of nodes x 4 chips into 3 (or 2 for v5e) axes
    ("tpu-v4-pod", 16, [4, 4, 4]), ("tpu-v4-pod", 64, [8, 8, 4]),
    ("tpu-v5p-pod", 16, [4, 4, 4]), ("tpu-v5p-pod", 64, [8, 8, 4]),
    ("tpu-v5e-pod", 16, [16, 8]), ("tpu-v5e-pod", 32, [16, 16]),
])
def test_pods_refactor_their_torus(name, nodes, dims):
    assert st.load_cluster(name, nodes=nodes).network.torus_dims == dims


def test_nodes_override_rejects_nonsense():
    with pytest.raises(st.SpecError) as info:
        st.load_cluster("dgx-h100", nodes=0)
    assert info.value.fields == ["nodes"]


def test_efficiency_defaults_for_every_device_kind_are_complete():
    for kind in DeviceKind:
        eff = load_efficiency_default(kind.value)
        assert set(eff.compute) == set(OpClass), kind
        assert 0 < eff.curve(OpClass.MATMUL).peak_fraction <= 1


def test_device_efficiency_blocks_are_complete_and_use_mamf():
    # Max achievable matmul FLOP/s over the dense peak, best shape: components.md 1a [MLE-ACC]
    # A100 SXM 271.2 / 312 = 0.869, H100 SXM 794.5 / 989.4 = 0.803 ("H200 is the same");
    # hardware.md 1c MI300X 60.1 %. Component-derived profiles are fitted below it (never above):
    # A100 0.804 (the typical large shape), H100 0.803 (the fit reaches the bound).
    mamf = {"a100-sxm4-80gb": 0.869, "a100-sxm4-40gb": 0.869, "h100-sxm5-80gb": 0.803, "h200-sxm-141gb": 0.803,
            "mi300x": 0.601}
    for name, ceiling in mamf.items():
        eff = st.load_device(name).efficiency
        matmul = eff.curve(OpClass.MATMUL).peak_fraction
        if eff.source.startswith("components"):
            assert ceiling - 0.07 <= matmul, name
        assert matmul <= ceiling, name
    for name in library_names("device"):
        eff = st.load_device(name).efficiency
        if eff is not None:
            assert set(eff.compute) == set(OpClass), name


def test_library_cross_references_resolve():
    links = set(library_names("link"))
    for name in library_names("device"):
        d = st.load_device(name)
        assert d.host_link is None or d.host_link.name in links, f"{name}.host_link {d.host_link!r}"
        assert (d.memory_external is not None) == (d.kind is DeviceKind.WAFER), name
    for name in library_names("node"):
        n = st.load_node(name)
        if n.host.pcie_link is not None and n.device.host_link is not None:
            assert n.host.pcie_link.name == n.device.host_link.name, name


def test_iter_sourced_counts_each_number_once():
    node = st.load_node("dgx-h100")
    own = [p for p, _ in iter_sourced(node, into_refs=False)]
    every = [p for p, _ in iter_sourced(node)]
    assert "host.cpu_cores" in own and not any(p.startswith("device.") for p in own)
    assert "device.peak_flops_per_s.bf16" in every
    assert len(every) > len(own)


def test_host_link_feeds_the_copy_when_the_host_has_none():
    """A device alone (Cluster.single: no host PCIe) still copies its input over its own host link:
    64 MB per sample at PCIe Gen5 x16 (63 GB/s per direction, pinned) is 64e6 / 63e9 s per sample."""
    from simtrain.cost.data_pipeline import pipeline_times
    from simtrain.specs.train import DataPipeline
    d = st.load_device("h100-sxm5-80gb")
    assert d.host_link.name == "pcie-gen5-x16"
    node = st.Cluster.single(d).node
    assert node.host.pcie_link is None
    data = DataPipeline(sample_bytes=64e6, pin_memory=True)
    t = pipeline_times(data, 10, 0.0, node)
    assert t.transfer_s == pytest.approx(10 * 64e6 / 63e9)
