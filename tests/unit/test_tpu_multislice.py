"""TPU multislice: ICI tori per slice, the data-centre network (DCN) between slices, and the
hierarchical data-parallel all-reduce across them (simtrain/parallel/multislice.py)."""

import pytest

import simtrain as st
from simtrain.cost.collectives import collective_time
from simtrain.parallel.topology import group_topology

LAYOUT = dict(tp=12, dp=512, pp=1)


@pytest.fixture(scope="module")
def cluster():
    return st.load_cluster("tpu-v4-multislice")


def test_two_slices_of_3072_chips(cluster):
    assert cluster.devices_count == 6144 and cluster.network.slices_count == 2
    # SB-TPU: DCN ≈ 2.5e10 B/s per host = 2 x 100 GbE
    assert cluster.network.dcn_per_node_bytes_per_s == pytest.approx(25e9)


def test_dp_group_spans_ici_axes_then_dcn(cluster):
    dims = group_topology(cluster, LAYOUT, "dp").dims
    assert [(d.size, d.kind, d.tier) for d in dims] == [(16, "ring", "tpu-ici"), (16, "ring", "tpu-ici"),
                                                        (2, "switch", "qsfp28-100gbe")]
    # one chip's DCN share: 25 GB/s per host over its 4 chips
    assert dims[-1].bandwidth_bytes_per_s == pytest.approx(25e9 / 4)
    # the model-parallel group stays on one whole ICI axis (12 chips, a multiple of 4: it wraps)
    (tp,) = group_topology(cluster, LAYOUT, "tp").dims
    assert (tp.size, tp.kind, tp.wraparound) == (12, "ring", True)


def test_dp_all_reduce_is_hierarchical_and_dcn_carries_one_256th(cluster):
    topo = group_topology(cluster, LAYOUT, "dp")
    size = 1e9
    r = collective_time("all_reduce", size, topo)
    assert r.algorithm == "hierarchical"
    # reduce-scatter over the first ICI axis (S -> S/16 per chip), all-reduce of that shard over the
    # rest (second ICI axis x DCN = 32 ranks: one ring, 2·31/32 of the shard per chip, and 1 of its
    # 16 chip-hops per slice crosses the DCN), all-gather over the first axis
    assert r.detail == "hierarchical[reduce_scatter:ring@0 > all_reduce:ring@1-2 > all_gather:ring@0]"
    assert r.bytes_sent_per_rank["qsfp28-100gbe"] == pytest.approx(2 * 31 / 32 * size / 16 / 16, rel=1e-9)
    # a flat ring over all 512 ranks would push 2·511/512 of S through the slowest (DCN) port
    flat = collective_time("all_reduce", size, topo, algorithm="ring")
    assert r.seconds < flat.seconds


def test_one_slice_has_no_dcn_and_nodes_scale_slices(cluster):
    four = cluster.with_nodes(4 * 768)
    assert four.network.slices_count == 4 and four.devices_count == 4 * 3072
    one = cluster.with_nodes(768)
    assert one.network.slices_count == 1
    assert all(d.tier == "tpu-ici" for d in group_topology(one, dict(tp=12, dp=256), "dp").dims)
    assert cluster.with_nodes(2).network.slices_count == 1  # fewer hosts than a slice: one smaller slice
    with pytest.raises(ValueError, match="multiple of 768"):
        cluster.with_nodes(1000)


def test_dcn_slows_the_gradient_sync_against_one_big_slice(cluster):
    model = st.load_model("gpt2-xl")
    cfg = dict(global_batch_size=6144, micro_batch_size=1, seq_len=1024, tp=1, dp=6144, zero_stage=1)
    multi = st.estimate(model, cluster, cfg)
    dp_multi = next(c for c in multi.comm if c.axis == "dp").total_s
    pod = st.load_cluster("tpu-v4-pod").with_nodes(1536)
    dp_pod = next(c for c in st.estimate(model, pod, cfg).comm if c.axis == "dp").total_s
    assert dp_multi > dp_pod


def test_v5p_multislice_loads():
    c = st.load_cluster("tpu-v5p-multislice")
    assert c.devices_count == 12288 and c.network.dcn_per_node_bytes_per_s == pytest.approx(25e9)


def test_mxu_tiles_are_128():
    # TPU v4 / v5p / v5e MXUs are 128 x 128 systolic arrays: GEMM n and k pad to 128 (hardware.md 3)
    for name in ("tpu-v4", "tpu-v5p", "tpu-v5e"):
        assert st.load_device(name).matrix_unit.tile[1:] == (128, 128)
