"""Placement of parallel groups on synthetic clusters, and the logical topologies they see.

Every cluster here is built in the test with round numbers, so the expected dimensions are derived by
hand from the rules in simtrain/parallel/topology.py (and docs/collectives.md)."""

from __future__ import annotations

import pytest

import simtrain as st
from simtrain.cost.collectives import Dimension, LogicalTopology, collective_time
from simtrain.errors import SpecError
from simtrain.glossary import OpClass
from simtrain.parallel.topology import (
    GroupPlacement,
    group_placement,
    group_topology,
    p2p_time,
    pipeline_send_tier,
    torus_axis_wraps,
)
from simtrain.specs.hardware import Cluster, Device

US = 1e-6


def _s(value):
    return {"value": value, "source": "invented for tests", "mark": "U"}


def _device(name="gpu-x", kind="gpu", fraction=0.5) -> Device:
    return Device.model_validate({
        "name": name, "kind": kind, "peak_flops_per_s": {"bf16": _s(100e12)},
        "memory": [{"name": "hbm", "level": "hbm", "capacity_bytes": _s(80e9), "bandwidth_bytes_per_s": _s(2e12)}],
        "efficiency": {"compute": {c.value: {"peak_fraction": 1.0} for c in OpClass},
                       "link_bandwidth_fraction": fraction, "extra": {"collective_base_latency_s": 0.0}}})


def _link(name, bw, lat, kind="nvlink"):
    return {"name": name, "kind": kind, "bandwidth_per_direction_bytes_per_s": _s(bw), "latency_s": _s(lat)}


def _cluster(nodes=4, per_node=8, fabric=None, network=None, device=None) -> Cluster:
    fabric = fabric or {"topology": "nvswitch", "link": _link("nvl", 25e9, 1 * US), "links_per_device": 12,
                        "switch_latency_s": _s(0.5 * US)}
    network = network or {"topology": "rail_optimized", "nic_link": _link("ib", 25e9, 2 * US, "infiniband"),
                          "nics_per_node": 8, "switch_latency_s": _s(0.25 * US)}
    host = {"cpu_cores": _s(64), "dram_bandwidth_bytes_per_s": _s(200e9)}
    node = {"name": "node-x", "device": device or _device(), "devices_count": per_node, "fabric": fabric,
            "host": host}
    return Cluster.model_validate({"name": "cluster-x", "node": node, "nodes_count": nodes, "network": network})


def test_tensor_and_data_parallel_groups_on_nvswitch_nodes():
    c = _cluster()  # 4 nodes × 8 GPUs; NVSwitch port = 12 × 25 GB/s; α = 1 + 0.5 µs
    tp = group_placement(c, {"tp": 8, "dp": 4}, "tp")
    nvswitch = Dimension(8, 300e9, 1.5 * US, "switch", "nvl")
    assert tp == GroupPlacement("tp", 8, 8, 1, ((8, 1),), LogicalTopology((nvswitch,), 0.0, 0.0, 0.5, 1.0, "tp8"))
    dp = group_placement(c, {"tp": 8, "dp": 4}, "dp")
    # one rank per node, its own rail NIC: 25 GB/s; all 4 nodes under one rail leaf: α = 2 + 0.25 µs
    nic = Dimension(4, 25e9, 2.25 * US, "switch", "ib")
    assert dp == GroupPlacement("dp", 4, 1, 4, ((4, 8),), LogicalTopology((nic,), 0.0, 0.0, 0.5, 1.0, "dp4"))


def test_group_with_several_ranks_per_node_spans_two_tiers():
    c = _cluster()
    # tp 2: a dp group of 16 has 4 members on each of 4 nodes; 4 ranks share min(4, 8) = 4 NICs → 25 GB/s each
    p = group_placement(c, {"tp": 2, "dp": 16}, "dp")
    assert (p.size, p.devices_per_node, p.nodes_spanned) == (16, 4, 4)
    assert p.topology.dims == (Dimension(4, 300e9, 1.5 * US, "switch", "nvl"),
                               Dimension(4, 25e9, 2.25 * US, "switch", "ib"))


def test_fewer_nics_than_ranks_share_them():
    net = {"topology": "rail_optimized", "nic_link": _link("ib", 25e9, 2 * US, "infiniband"), "nics_per_node": 2}
    c = _cluster(network=net)
    # dp over all 32 GPUs: 8 per node share 2 NICs → 2 × 25 / 8 = 6.25 GB/s per rank
    dims = group_topology(c, {"dp": 32}, "dp").dims
    assert dims[1] == Dimension(4, 6.25e9, 2 * US, "switch", "ib")


def test_rank_order_moves_tensor_parallel_off_the_node():
    c = _cluster()
    # dp innermost: the tp group of 8 has stride 4 → ranks 0, 4, …, 28: 2 GPUs on each of 4 nodes
    p = group_placement(c, {"tp": 8, "dp": 4}, "tp", "dp-tp-cp-ep-pp")
    assert (p.devices_per_node, p.nodes_spanned, p.sub_axes) == (2, 4, ((8, 4),))
    assert [d.tier for d in p.topology.dims] == ["nvl", "ib"]
    assert group_placement(c, {"tp": 8, "dp": 4}, "dp", "dp-tp-cp-ep-pp").nodes_spanned == 1


def test_oversubscription_beyond_one_leaf():
    def net(kind):
        return {"topology": kind, "nic_link": _link("ib", 25e9, 2 * US, "infiniband"), "nics_per_node": 8,
                "oversubscription": 2.0, "switch_latency_s": _s(0.25 * US)}
    # plain fat tree: a 32-port leaf holds 32 / 8 = 4 nodes, so 8 nodes cross the spine: 25/2 GB/s, 3 hops
    fat = _cluster(nodes=8, network=net("fat_tree"))
    assert group_topology(fat, {"tp": 8, "dp": 8}, "dp").dims == (Dimension(8, 12.5e9, 2.75 * US, "switch", "ib"),)
    assert group_topology(fat, {"tp": 8, "dp": 8}, "dp", leaf_ports=64).dims[0].bandwidth_bytes_per_s == 25e9
    # rail-optimised: a rail leaf holds 32 nodes (one NIC each); 64 nodes do not fit
    rail = _cluster(nodes=64, network=net("rail_optimized"))
    assert group_topology(rail, {"tp": 8, "dp": 32, "pp": 2}, "dp").dims[0].bandwidth_bytes_per_s == 25e9
    assert group_topology(rail, {"tp": 8, "dp": 64}, "dp").dims[0].bandwidth_bytes_per_s == 12.5e9


def test_expert_group_is_carved_out_of_context_and_data_ranks():
    c = _cluster(nodes=2)
    # tp 2, cp 2, dp 4, ep 4: ranks tp-fastest; cp stride 2, dp stride 4 → ep takes cp (2) then 2 of dp
    p = group_placement(c, {"tp": 2, "cp": 2, "dp": 4, "ep": 4}, "ep")
    assert p.sub_axes == ((2, 2), (2, 4))
    assert (p.size, p.nodes_spanned) == (4, 1)
    with pytest.raises(SpecError, match="ep"):
        group_placement(c, {"tp": 2, "dp": 4, "ep": 3}, "ep")


def test_pcie_tree_and_full_mesh_nodes():
    pcie = _cluster(nodes=1, fabric={"topology": "pcie_tree", "link": _link("pcie", 32e9, 2 * US, "pcie")})
    assert group_topology(pcie, {"tp": 4, "dp": 2}, "tp").dims == (Dimension(4, 32e9, 2 * US, "switch", "pcie"),)
    mesh = _cluster(nodes=1, fabric={"topology": "full_mesh", "link": _link("xgmi", 64e9, 1 * US, "infinity_fabric"),
                                     "links_per_device": 7})
    d = group_topology(mesh, {"tp": 8}, "tp").dims[0]
    # one link per peer; a ring group of 8 gets 3 Hamiltonian cycles run both ways = 6 links
    assert (d.kind, d.bandwidth_bytes_per_s, d.pair_bandwidth_bytes_per_s, d.ring_bandwidth_bytes_per_s) == (
        "mesh", 7 * 64e9, 64e9, 6 * 64e9)
    assert group_topology(mesh, {"tp": 4, "dp": 2}, "tp").dims[0].ring_bandwidth_bytes_per_s == 2 * 64e9


def _tpu(name, dims, per_host=4, host_dims=(2, 2, 1)):
    ici = _link("ici", 45e9, 1 * US, "ici")
    fabric = {"topology": "torus", "link": ici, "links_per_device": 6, "torus_dims": list(host_dims)}
    total = 1
    for n in dims:
        total *= n
    net = {"topology": "torus", "nic_link": ici, "torus_dims": list(dims)}
    return _cluster(nodes=total // per_host, per_node=per_host, fabric=fabric, network=net,
                    device=_device(name, "tpu", fraction=1.0))


def test_tpu_v4_slice_dimension_ordered_all_reduce():
    c = _tpu("tpu-v4-x", (4, 4, 4))
    # dp over the whole 4×4×4 slice: three axes of 4 with wraparound (4 is a multiple of 4 on v4)
    dims = group_topology(c, {"dp": 64}, "dp").dims
    axis = Dimension(4, 90e9, 1 * US, "ring", "ici", ring_bandwidth_bytes_per_s=90e9,
                     pair_bandwidth_bytes_per_s=45e9, wraparound=True)
    assert dims == (axis, axis, axis)
    t = group_topology(c, {"dp": 64}, "dp")
    r = collective_time("all_reduce", 64e6, t, algorithm="hierarchical", candidates=("ring", "hierarchical"))
    assert r.seconds == pytest.approx(18 * US + 1400 * US)  # test_collectives derives this number
    # tp 2 on the x axis: a 2-chip line, one link each way. dp 32 spans x (chips 0 and 2) × y × z: on
    # the wrapped x axis the pair has two 2-hop paths, each link shared with the pair {1, 3}: 22.5 GB/s
    # per path, both paths for a ring
    tp = group_topology(c, {"tp": 2, "dp": 32}, "tp").dims
    assert tp == (Dimension(2, 90e9, 1 * US, "ring", "ici", ring_bandwidth_bytes_per_s=45e9,
                            pair_bandwidth_bytes_per_s=45e9, wraparound=False),)
    dp = group_topology(c, {"tp": 2, "dp": 32}, "dp").dims
    assert dp[0] == Dimension(2, 45e9, 2 * US, "ring", "ici", ring_bandwidth_bytes_per_s=45e9,
                              pair_bandwidth_bytes_per_s=22.5e9, wraparound=True)
    assert len(dp) == 3


def test_tpu_wraparound_rules():
    v4, v5e = _device("tpu-v4", "tpu"), _device("tpu-v5e", "tpu")
    assert [torus_axis_wraps(v4, n) for n in (2, 4, 6, 8, 16)] == [False, True, False, True, True]
    assert [torus_axis_wraps(v5e, n) for n in (4, 8, 16)] == [False, False, True]
    assert torus_axis_wraps(_device(), 3)  # a non-TPU torus is a torus
    c = _tpu("tpu-v5e-x", (16, 16), per_host=8, host_dims=(4, 2))
    full, part = group_topology(c, {"tp": 16, "dp": 16}, "tp"), group_topology(c, {"tp": 4, "dp": 64}, "tp")
    assert (full.dims[0].wraparound, part.dims[0].wraparound) == (True, False)


def test_wafer_scale_swarmx_reduce_and_broadcast():
    swarm = _link("eth100", 12.5e9, 2 * US, "ethernet")
    c = _cluster(nodes=4, per_node=1, fabric={"topology": "wafer", "link": _link("wafer", 1e12, 0.0, "loopback")},
                 network={"topology": "wafer_fabric", "nic_link": swarm, "nics_per_node": 12,
                          "switch_latency_s": _s(1 * US)},
                 device=_device("wse-x", "wafer", fraction=1.0))
    dims = group_topology(c, {"dp": 4}, "dp").dims
    # 12 × 12.5 GB/s = 150 GB/s per system; tree depth ⌈log2 4⌉ = 2 switch hops
    assert dims == (Dimension(4, 150e9, 4 * US, "tree", "eth100", in_network_reduction=True),)
    r = collective_time("all_reduce", 150e9, group_topology(c, {"dp": 4}, "dp"))
    # gradients reduced up, weights broadcast down, full duplex: 2α + S/B
    assert (r.algorithm, r.seconds) == ("in_network", pytest.approx(8 * US + 1.0))


def test_p2p_between_pipeline_stages():
    c = _cluster()
    # same node: all 12 NVLinks (300 GB/s × 0.5), α = 1.5 µs; across nodes: one NIC (25 GB/s × 0.5), 2.25 µs
    assert p2p_time(1.5e9, c, "fabric").seconds == pytest.approx(1.5 * US + 1.5e9 / 150e9)
    assert p2p_time(1.25e9, c, "network").seconds == pytest.approx(2.25 * US + 0.1)
    assert pipeline_send_tier(c, {"tp": 8, "pp": 4}) == "network"
    assert pipeline_send_tier(c, {"tp": 2, "pp": 4, "dp": 4}) == "network"
    assert pipeline_send_tier(c, {"tp": 2, "pp": 4, "dp": 4}, "tp-pp-cp-ep-dp") == "fabric"
    single = Cluster.single(_device())
    with pytest.raises(SpecError, match="src_tier"):
        p2p_time(1e6, single, "network")


def test_dgx_a100_library_cluster_uses_its_spec_numbers():
    c = st.load_cluster("dgx-a100-80gb", nodes=16)
    fab, net = c.node.fabric, c.network
    tp = group_topology(c, {"tp": 8, "pp": 2, "dp": 8}, "tp").dims[0]
    assert tp.bandwidth_bytes_per_s == fab.link.per_direction_bytes_per_s * fab.links_per_device
    dp = group_topology(c, {"tp": 8, "pp": 2, "dp": 8}, "dp").dims[0]
    assert dp.bandwidth_bytes_per_s == net.nic_link.per_direction_bytes_per_s
    assert dp.size == 8 and dp.tier == net.nic_link.name


def test_layout_objects_and_caching():
    c = _cluster()

    class Lay:  # any object with the degrees works (the estimator passes its own Layout record)
        tp, cp, ep, dp, pp = 8, 1, 1, 4, 1
    assert group_topology(c, Lay(), "dp") is group_topology(c, {"tp": 8, "dp": 4}, "dp")
    with pytest.raises(SpecError, match="exceeds"):
        group_topology(c, {"tp": 8, "dp": 8}, "dp")
    with pytest.raises(SpecError, match="rank_order"):
        group_topology(c, {"tp": 8}, "tp", "tp-dp-pp")
    with pytest.raises(SpecError, match="axis"):
        group_topology(c, {"tp": 8}, "xp")


def test_faster_nics_never_slow_data_parallel_all_reduce():
    slow = _cluster(network={"topology": "rail_optimized", "nic_link": _link("ib", 25e9, 2 * US, "infiniband"),
                             "nics_per_node": 8})
    fast = _cluster(network={"topology": "rail_optimized", "nic_link": _link("ib", 50e9, 2 * US, "infiniband"),
                             "nics_per_node": 8})
    for size in (1e3, 1e6, 1e9):
        for lay in ({"tp": 8, "dp": 4}, {"tp": 2, "dp": 16}, {"dp": 32}):
            t_slow = collective_time("all_reduce", size, group_topology(slow, lay, "dp")).seconds
            t_fast = collective_time("all_reduce", size, group_topology(fast, lay, "dp")).seconds
            assert t_fast <= t_slow
