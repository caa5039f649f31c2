"""Invariants of the collective cost model (hypothesis): bandwidth lower bounds, monotonicity, busbw."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from simtrain.cost.collective_algorithms import ALGORITHMS_BY_KIND
from simtrain.cost.collectives import Dimension, LogicalTopology, collective_time
from simtrain.errors import SpecError

POINT_TO_POINT = tuple(a for a in ALGORITHMS_BY_KIND["all_reduce"] if a != "in_network")

sizes = st.integers(min_value=2, max_value=16)
bandwidths = st.floats(min_value=1e9, max_value=1e12)
latencies = st.floats(min_value=0.0, max_value=2e-5)
messages = st.one_of(st.just(0.0), st.floats(min_value=1.0, max_value=1e10))


@st.composite
def dimensions(draw, kind=None):
    kind = kind or draw(st.sampled_from(("switch", "mesh", "ring")))
    wrap = draw(st.booleans())
    return Dimension(draw(sizes), draw(bandwidths), draw(latencies), kind, tier=f"t{draw(st.integers(0, 2))}",
                     wraparound=wrap)


@st.composite
def topologies(draw):
    dims = tuple(draw(st.lists(dimensions(), min_size=1, max_size=3)))
    return LogicalTopology(dims, base_latency_s=draw(latencies), bandwidth_fraction=draw(st.floats(0.1, 1.0)))


def _scaled(d: Dimension, k: float) -> Dimension:
    return Dimension(d.size, d.bandwidth_bytes_per_s * k, d.latency_s, d.kind, d.tier,
                     d.ring_bandwidth_bytes_per_s * k, d.pair_bandwidth_bytes_per_s * k, d.wraparound,
                     d.in_network_reduction)


def _runs(kind, size, topo, alg):
    try:
        return collective_time(kind, size, topo, algorithm=alg)
    except SpecError:  # algorithm not valid on this topology
        return None


@settings(max_examples=150, deadline=None)
@given(topologies(), messages)
def test_no_all_reduce_beats_the_bandwidth_bounds(topo, size):
    # Point-to-point all-reduce: each rank must send 2(n−1)/n·S through all its links (Σ_d B_d), and the
    # ranks of one slice of the inner dimensions must push 2(s_L−1)/s_L·S through dimension L.
    f = topo.bandwidth_fraction
    dims = [d for d in topo.dims if d.size > 1]
    n = math.prod(d.size for d in dims)
    inner = math.prod(d.size for d in dims[:-1])
    injection = f * sum(d.bandwidth_bytes_per_s for d in dims)
    last = dims[-1]
    cut = 2 * (last.size - 1) / last.size * size / (f * last.bandwidth_bytes_per_s * inner)
    bound = max(2 * (n - 1) / n * size / injection, cut)
    for alg in POINT_TO_POINT + (None,):
        r = _runs("all_reduce", size, topo, alg)
        if r is not None:
            assert r.bandwidth_s >= bound * (1 - 1e-9)
            assert math.isclose(r.seconds, r.latency_s + r.bandwidth_s)


@settings(max_examples=150, deadline=None)
@given(topologies(), messages, st.sampled_from(("reduce_scatter", "all_gather")))
def test_no_reduce_scatter_or_all_gather_beats_injection(topo, size, kind):
    f = topo.bandwidth_fraction
    dims = [d for d in topo.dims if d.size > 1]
    n = math.prod(d.size for d in dims)
    bound = (n - 1) / n * size / (f * sum(d.bandwidth_bytes_per_s for d in dims))
    for alg in ALGORITHMS_BY_KIND[kind]:
        r = _runs(kind, size, topo, alg)
        if r is not None and alg != "in_network":
            assert r.bandwidth_s >= bound * (1 - 1e-9)


@settings(max_examples=150, deadline=None)
@given(topologies(), messages, st.integers(0, 2), st.floats(1.0, 10.0),
       st.sampled_from(("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast")))
def test_faster_links_never_slow_a_collective(topo, size, which, k, kind):
    i = which % len(topo.dims)
    faster = LogicalTopology(tuple(_scaled(d, k) if j == i else d for j, d in enumerate(topo.dims)),
                             topo.base_latency_s, topo.step_overhead_s, topo.bandwidth_fraction)
    slow, fast = _runs(kind, size, topo, None), _runs(kind, size, faster, None)
    assert fast.seconds <= slow.seconds * (1 + 1e-12)


@settings(max_examples=150, deadline=None)
@given(topologies(), messages, messages,
       st.sampled_from(("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "reduce")))
def test_time_is_monotone_in_message_size(topo, a, b, kind):
    small, large = sorted((a, b))
    assert collective_time(kind, small, topo).seconds <= collective_time(kind, large, topo).seconds


@settings(max_examples=150, deadline=None)
@given(st.integers(2, 1024), bandwidths, latencies, st.floats(min_value=1.0, max_value=1e10),
       st.sampled_from(("switch", "mesh", "ring")))
def test_busbw_never_exceeds_the_link_bandwidth(n, bw, lat, size, kind):
    # no in-network reduction: however many ranks, busbw ≤ what one rank can inject into the dimension
    topo = LogicalTopology((Dimension(n, bw, lat, kind),))
    for alg in POINT_TO_POINT + (None,):
        r = _runs("all_reduce", size, topo, alg)
        if r is not None:
            assert r.busbw_bytes_per_s <= bw * (1 + 1e-9)
    for kind_ in ("reduce_scatter", "all_gather", "all_to_all", "broadcast"):
        assert collective_time(kind_, size, topo).busbw_bytes_per_s <= bw * (1 + 1e-9)
