"""Collective algorithms on hand-built logical topologies: every expected number is derived in the test."""

from __future__ import annotations

import dataclasses
import math

import pytest

from simtrain.cost.collectives import (
    CollectiveResult,
    Dimension,
    LogicalTopology,
    algbw_bytes_per_s,
    bus_bandwidth_factor,
    busbw_bytes_per_s,
    collective_time,
    seconds_from_busbw,
)
from simtrain.cost.cost import Cost
from simtrain.errors import MissingRuleError, SpecError
from simtrain.specs.library import load_efficiency_default

US = 1e-6


def assert_same(actual: CollectiveResult, expected: CollectiveResult) -> None:
    """Whole-record comparison; floats to 1e-9 relative."""
    for f in dataclasses.fields(CollectiveResult):
        a, e = getattr(actual, f.name), getattr(expected, f.name)
        if isinstance(e, float):
            assert a == pytest.approx(e, rel=1e-9, abs=1e-15), f.name
        elif isinstance(e, dict):
            assert dict(a) == pytest.approx(e, rel=1e-9), f.name
        else:
            assert a == e, f.name


def two_tier() -> LogicalTopology:
    """8 ranks per node on a 300 GB/s crossbar (α 1 µs), 16 nodes on 25 GB/s per rank (α 3 µs)."""
    return LogicalTopology((Dimension(8, 300e9, 1 * US, tier="nvlink"), Dimension(16, 25e9, 3 * US, tier="ib")))


def test_ring_all_reduce_four_ranks_by_hand():
    # 4 ranks, B = 10 GB/s, α = 1 µs, S = 1 MB: 2(n−1) = 6 steps of (α + (S/n)/B) = 6·(1 µs + 25 µs)
    topo = LogicalTopology.single(4, 10e9, 1 * US)
    got = collective_time("all_reduce", 1e6, topo, algorithm="ring")
    assert_same(got, CollectiveResult(
        kind="all_reduce", algorithm="ring", ranks=4, message_bytes=1e6, seconds=6 * (1 * US + 25 * US),
        latency_s=6 * US, bandwidth_s=6 * 25 * US, steps=6, messages=6 * 4,
        bytes_sent_per_rank={"link": 2 * 3 / 4 * 1e6}, detail="ring"))
    assert got.cost() == Cost(seconds=got.seconds, link_bytes={"link": 1.5e6})


def test_efficiency_scales_bandwidth_and_latency():
    # fraction 0.5 → B = 5 GB/s; α' = 2 × 1 µs + 1 µs overhead = 3 µs; base 5 µs once:
    # 5 µs + 6·(3 µs + 0.25 MB / 5 GB/s) = 5 + 6·53 = 323 µs
    eff = load_efficiency_default("gpu").model_copy(update={
        "link_bandwidth_fraction": 0.5, "link_latency_scale": 2.0,
        "extra": {"collective_base_latency_s": 5 * US, "collective_step_overhead_s": 1 * US}})
    topo = LogicalTopology.single(4, 10e9, 1 * US)
    got = collective_time("all_reduce", 1e6, topo, algorithm="ring", efficiency=eff)
    assert got.seconds == pytest.approx(323 * US)
    assert got.latency_s == pytest.approx(5 * US + 18 * US)
    same = LogicalTopology.single(4, 10e9, 1 * US, base_latency_s=5 * US, step_overhead_s=1 * US,
                                  bandwidth_fraction=0.5, latency_scale=2.0)
    assert collective_time("all_reduce", 1e6, same, algorithm="ring").seconds == pytest.approx(323 * US)


@pytest.mark.parametrize("kind,factor", [
    ("all_reduce", 2 * 7 / 8), ("reduce_scatter", 7 / 8), ("all_gather", 7 / 8), ("all_to_all", 7 / 8),
    ("broadcast", 1.0), ("reduce", 1.0), ("send_recv", 1.0), ("allreduce", 2 * 7 / 8), ("all-gather", 7 / 8)])
def test_busbw_factors_match_nccl_tests(kind, factor):
    assert bus_bandwidth_factor(kind, 8) == pytest.approx(factor)
    # round trip: 1 GB in 10 ms is algbw 100 GB/s; busbw = factor × that; and back
    assert algbw_bytes_per_s(1e9, 0.01) == pytest.approx(100e9)
    bus = busbw_bytes_per_s(kind, 1e9, 0.01, 8)
    assert bus == pytest.approx(100e9 * factor)
    assert seconds_from_busbw(kind, 1e9, bus, 8) == pytest.approx(0.01)


def test_ring_busbw_equals_link_bandwidth_without_latency():
    # zero latency: t = 2(n−1)/n · S/B, so busbw = B for every n (the point of the convention)
    for n in (2, 3, 8, 64):
        r = collective_time("all_reduce", 1e8, LogicalTopology.single(n, 50e9, 0.0), algorithm="ring")
        assert r.busbw_bytes_per_s == pytest.approx(50e9)
    rs = collective_time("reduce_scatter", 1e8, LogicalTopology.single(8, 50e9, 0.0), algorithm="ring")
    assert rs.busbw_bytes_per_s == pytest.approx(50e9)


def test_selection_flips_from_tree_to_ring():
    # n = 8, B = 100 GB/s, α = 1 µs. tree: 2·log2(8)·α + 2S/B = 6 µs + 2S/B; ring: 14 µs + 1.75 S/B.
    # Equal where 8 µs = 0.25·S/B, i.e. S = 32·α·B = 3.2 MB.
    topo = LogicalTopology.single(8, 100e9, 1 * US)
    small, large = collective_time("all_reduce", 3.0e6, topo), collective_time("all_reduce", 3.4e6, topo)
    assert (small.algorithm, large.algorithm) == ("tree", "ring")
    assert small.seconds == pytest.approx(6 * US + 2 * 3.0e6 / 100e9)
    assert large.seconds == pytest.approx(14 * US + 1.75 * 3.4e6 / 100e9)
    assert collective_time("all_reduce", 1e3, topo).steps == 6


def test_hierarchical_beats_flat_ring_across_nodes_then_loses_at_large_sizes():
    topo = two_tier()
    # S = 1 MB. flat ring: latency 2·(7·16·1 µs + 15·3 µs) = 314 µs; B_eff = min(300, 8·25) GB/s = 200 GB/s;
    # bandwidth 2·127/128 · 1 MB / 200 GB/s = 9.921875 µs.
    ring = collective_time("all_reduce", 1e6, topo, algorithm="ring")
    assert ring.seconds == pytest.approx(314 * US + 9.921875 * US)
    # hierarchical: RS over the node (ring: 7 µs + 7/8 MB/300 GB/s), all-reduce of S/8 = 125 kB across
    # 16 nodes (tree wins: 2·4·3 µs + 2·125 kB/25 GB/s = 34 µs vs ring 90 + 9.375 µs), AG over the node.
    hier = collective_time("all_reduce", 1e6, topo, algorithm="hierarchical")
    intra = 7 * US + 7 / 8 * 1e6 / 300e9
    assert hier.seconds == pytest.approx(2 * intra + 34 * US)
    assert hier.detail == "hierarchical[reduce_scatter:ring@0 > all_reduce:tree@1 > all_gather:ring@0]"
    assert hier.seconds < ring.seconds
    # 1 GB: phases run one after another, so the flat ring (intra and inter hops concurrently) wins:
    ring_big = collective_time("all_reduce", 1e9, topo, algorithm="ring")
    hier_big = collective_time("all_reduce", 1e9, topo, algorithm="hierarchical")
    assert ring_big.seconds == pytest.approx(314 * US + 2 * 127 / 128 * 1e9 / 200e9)
    inter_ring = 90 * US + 2 * 15 / 16 * 125e6 / 25e9
    assert hier_big.seconds == pytest.approx(2 * (7 * US + 7 / 8 * 1e9 / 300e9) + inter_ring)
    assert ring_big.seconds < hier_big.seconds
    # bytes per tier of the hierarchical one: 2·7/8 S on NVLink, 2·15/16·S/8 on the network
    assert dict(hier_big.bytes_sent_per_rank) == pytest.approx({"nvlink": 1.75e9, "ib": 2 * 15 / 16 * 125e6})


def test_chapter_ring_all_reduce_seven_steps_versus_fifty_six():
    # Chapter §8.6.1 (data parallelism, step 4): 8 GPUs, 100 MB of gradients, "7 communication steps
    # instead of the 56 steps needed for naive peer-to-peer synchronization".
    topo, S = LogicalTopology.single(8, 100e9, 1 * US), 100e6
    rs = collective_time("reduce_scatter", S, topo, algorithm="ring")
    ring = collective_time("all_reduce", S, topo, algorithm="ring")
    naive = collective_time("all_reduce", S, topo, algorithm="direct")
    assert rs.steps == 7                  # one ring phase: n − 1 steps
    assert ring.steps == 14               # the whole ring all-reduce: 2(n − 1)
    assert naive.messages == 56           # naive: every GPU sends its gradients to 7 peers: n(n − 1)
    assert naive.steps == 1               # ... all at once
    assert ring.messages == 112           # the ring issues more (smaller) messages: 2(n−1)·n
    # what the ring really saves is bytes per GPU: 2(n−1)/n·S = 175 MB vs (n−1)·S = 700 MB
    assert ring.bytes_sent_per_rank["link"] == pytest.approx(175e6)
    assert naive.bytes_sent_per_rank["link"] == pytest.approx(700e6)


def test_torus_dimension_ordered_all_reduce_on_4x4x4():
    # TPU-like 4×4×4 slice with wraparounds: per axis a bidirectional ring, 45 GB/s per link each way
    # → 90 GB/s per ring; α = 1 µs per hop. Dimension-ordered all-reduce of S = 64 MB:
    #   RS x on S, RS y on S/4, RS z on S/16, then AG z, y, x:
    #   latency Σ 2·(4−1)·α = 18 µs; bandwidth 2·(3/4)·(S/B)·(1 + 1/4 + 1/16) = 1400 µs.
    axis = Dimension(4, 90e9, 1 * US, kind="ring", tier="ici", pair_bandwidth_bytes_per_s=45e9)
    topo = LogicalTopology((axis, axis, axis))
    assert axis.ring_bandwidth_bytes_per_s == 90e9
    got = collective_time("all_reduce", 64e6, topo, algorithm="hierarchical", candidates=("ring", "hierarchical"))
    assert got.seconds == pytest.approx(18 * US + 1400 * US)
    assert got.steps == 18
    # the three axes at once (part p starts at axis p): each axis carries a third of the load
    multi = collective_time("all_reduce", 64e6, topo)
    assert multi.algorithm == "multi_axis"
    assert multi.seconds == pytest.approx(18 * US + 1400 * US / 3)
    # ... which meets the injection bound 2(n−1)/n·S / (6 links × 45 GB/s)
    assert multi.bandwidth_s == pytest.approx(2 * 63 / 64 * 64e6 / 270e9)


def test_line_without_wraparound_halves_ring_bandwidth():
    # a 4-chip axis with no wraparound: a ring embedded in a line uses each link once per direction
    line = Dimension(4, 90e9, 0.0, kind="ring", pair_bandwidth_bytes_per_s=45e9, wraparound=False)
    assert line.ring_bandwidth_bytes_per_s == 45e9
    r = collective_time("all_reduce", 1e6, LogicalTopology((line,)), algorithm="ring")
    assert r.seconds == pytest.approx(2 * 3 / 4 * 1e6 / 45e9)


def test_all_to_all_on_rings_and_switches():
    # bidirectional ring of 4, 45 GB/s per link: shortest paths Σ_j min(j, 4−j) = 4 hops per S/4 chunk,
    # 2·4 directed links → t = S·4/(4·2·45 GB/s); 2 hops of latency
    ring = LogicalTopology((Dimension(4, 90e9, 1 * US, kind="ring", pair_bandwidth_bytes_per_s=45e9),))
    r = collective_time("all_to_all", 1e6, ring)
    assert (r.algorithm, r.steps) == ("direct", 2)
    assert r.seconds == pytest.approx(2 * US + 1e6 * 4 / (4 * 2 * 45e9))
    # two tiers: 15/16 of the peers are on other nodes: 0.9375·S over 25 GB/s per rank
    a2a = collective_time("all_to_all", 1e8, two_tier())
    assert a2a.seconds == pytest.approx(3 * US + 0.9375e8 / 25e9)
    assert dict(a2a.bytes_sent_per_rank) == pytest.approx({"nvlink": 1e8 * 7 / 128, "ib": 0.9375e8})


def test_full_mesh_rings_and_one_shot():
    # 8-GPU full mesh, one 64 GB/s link per peer: 3 edge-disjoint Hamiltonian cycles run both ways → 384 GB/s
    mesh = Dimension(8, 7 * 64e9, 1 * US, kind="mesh")
    assert (mesh.pair_bandwidth_bytes_per_s, mesh.ring_bandwidth_bytes_per_s) == (64e9, 6 * 64e9)
    topo = LogicalTopology((mesh,))
    ring = collective_time("all_reduce", 1e8, topo, algorithm="ring")
    assert ring.bandwidth_s == pytest.approx(1.75e8 / 384e9)
    one_shot = collective_time("all_reduce", 1e8, topo, algorithm="one_shot")  # each peer on its own link
    assert one_shot.seconds == pytest.approx(1 * US + 1e8 / 64e9)


def test_recursive_halving_doubling_power_of_two_and_not():
    # Thakur et al. 2005: 2·log2(n) steps; bandwidth 2(n−1)/n·S/B.
    topo = LogicalTopology.single(8, 100e9, 1 * US)
    r = collective_time("all_reduce", 1e6, topo, algorithm="recursive_halving_doubling")
    assert (r.steps, r.seconds) == (6, pytest.approx(6 * US + 1.75e6 / 100e9))
    # n = 6: fold 2 extra ranks into partners (one step of S each way) around a 4-rank RHD
    r6 = collective_time("all_reduce", 1e6, LogicalTopology.single(6, 100e9, 1 * US), algorithm="rhd")
    assert r6.steps == 2 * 2 + 2
    assert r6.seconds == pytest.approx(6 * US + (2 * 3 / 4 * 1e6 + 2 * 1e6) / 100e9)


def test_in_network_reduction_and_broadcast():
    # NVLS/SHARP-style: send S up, get the reduced S back: 2α + S/B; broadcast: α + S/B
    sw = LogicalTopology((Dimension(8, 100e9, 1 * US, in_network_reduction=True),))
    r = collective_time("all_reduce", 1e8, sw)
    assert (r.algorithm, r.seconds) == ("in_network", pytest.approx(2 * US + 1e-3))
    assert r.busbw_bytes_per_s > 100e9  # the one case busbw may exceed the link rate
    b = collective_time("broadcast", 1e8, sw)
    assert b.seconds == pytest.approx(1 * US + 1e-3)


def test_broadcast_ring_and_tree():
    topo = LogicalTopology.single(8, 100e9, 1 * US)
    # pipelined chain: 7 hops of latency + S/B; binomial tree: 3 rounds of (α + S/B)
    ring = collective_time("broadcast", 1e8, topo, algorithm="ring")
    tree = collective_time("broadcast", 1e3, topo, algorithm="tree")
    assert ring.seconds == pytest.approx(7 * US + 1e-3)
    assert tree.seconds == pytest.approx(3 * (1 * US + 1e3 / 100e9))
    assert collective_time("reduce", 1e8, topo).algorithm == "ring"
    assert collective_time("broadcast", 1e3, topo).algorithm == "tree"


def test_one_rank_is_free_and_sizes_one_dimensions_are_ignored():
    one = collective_time("all_reduce", 1e9, LogicalTopology(()))
    assert (one.seconds, one.steps, one.algorithm) == (0.0, 0, "local")
    padded = LogicalTopology((Dimension(1, 1e9, 1.0, tier="a"), Dimension(4, 10e9, 1 * US, tier="b")))
    r = collective_time("all_reduce", 1e6, padded, algorithm="ring")
    assert r.seconds == pytest.approx(156 * US)
    assert dict(r.bytes_sent_per_rank) == pytest.approx({"b": 1.5e6})


def test_send_recv_uses_the_outermost_dimension():
    r = collective_time("send_recv", 1e8, two_tier())
    assert r.seconds == pytest.approx(3 * US + 1e8 / 25e9)
    assert dict(r.bytes_sent_per_rank) == {"nvlink": 0.0, "ib": 1e8}


def test_bad_inputs_are_spec_errors():
    topo = two_tier()
    with pytest.raises(SpecError, match="kind"):
        collective_time("allsum", 1e6, topo)
    with pytest.raises(SpecError, match="algorithm"):
        collective_time("all_reduce", 1e6, topo, algorithm="butterfly")
    with pytest.raises(SpecError, match="message_bytes"):
        collective_time("all_reduce", -1.0, topo)
    with pytest.raises(SpecError, match="message_bytes"):
        collective_time("all_reduce", math.nan, topo)
    with pytest.raises(SpecError, match="cannot run"):  # one-shot is a single-crossbar algorithm
        collective_time("all_reduce", 1e6, topo, algorithm="direct")
    with pytest.raises(SpecError, match="dimension.kind"):
        Dimension(4, 1e9, 0.0, kind="hypercube")
    with pytest.raises(SpecError, match="bandwidth"):
        Dimension(4, 0.0, 0.0)


def test_tree_fabric_has_no_all_to_all_rule():
    swarmx = LogicalTopology((Dimension(4, 150e9, 1 * US, kind="tree", in_network_reduction=True),))
    assert collective_time("all_reduce", 1e9, swarmx).algorithm == "in_network"
    with pytest.raises(MissingRuleError):
        collective_time("all_to_all", 1e9, swarmx)


def test_topologies_hash_by_value():
    assert hash(two_tier()) == hash(two_tier()) and two_tier() == two_tier()
