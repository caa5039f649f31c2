"""Placement: which hardware tiers a parallel group spans, and the logical topology it sees.

Ranks are numbered by the rank order, innermost first (default ``tp-cp-ep-dp-pp``: tensor-parallel
peers are adjacent ranks, hence on one node). ``ep`` is carved out of the cp × dp ranks (Megatron-core):
for placement an expert group is the innermost ``ep`` positions of the combined cp/dp index space.
Rank r lives on node ``r // devices_per_node`` (or, on a torus network, at torus coordinate
``(r mod X, r // X mod Y, …)``). Each group of an axis is a translate of rank 0's group; we place that
one (irregular layouts, e.g. tp = 3 on 8-device nodes, are approximated conservatively).

Rules (docs/collectives.md has the derivations):

* **inside a node** — NVSwitch: a crossbar, per-rank port = link × links_per_device. PCIe tree: a star
  through the root complex, each device's port its own x16 link per direction (specs carry no PCIe
  switch layout, so per-switch uplink contention is not modelled). Full mesh (MI300X): one link per
  peer; a ring gets 2⌊(k−1)/2⌋ links (RCCL multi-ring). Torus / ring fabric: per-axis bidirectional rings.
* **between nodes** — fat tree or rail-optimised: a group with k ranks per node uses min(k, nics) NICs, so
  a rank's share is min(k, nics)·NIC / k. A group whose nodes are not all under one leaf (rail switch)
  pays ``oversubscription`` and three switch hops instead of one. A leaf has ``leaf_ports`` down-ports
  (default 32): a rail-optimised leaf serves 32 nodes (one NIC each), a plain fat-tree leaf 32 / nics.
* **torus networks (TPU ICI)** — dimension per torus axis the group spans, neighbour links only; an axis
  the group covers whole has a wraparound on TPU v4/v5p when its length is a multiple of 4 and on
  v5e/v6e only for the full 16 ([SB-TPU], hardware.md §3); otherwise it is a line.
* **TPU multislice** — a torus network of ``slices_count`` slices: a group's members inside one slice get
  the torus axes above, and a group spanning slices gets one more ``switch`` dimension over the DCN
  (parallel/multislice.py), so a DP all-reduce runs hierarchically (reduce-scatter on ICI, all-reduce
  over DCN, all-gather on ICI).
* **wafer-scale (SwarmX)** — a broadcast/reduce tree between MemoryX and the systems: weights are
  broadcast, gradients sum-reduced in the fabric (an in-network ``tree`` dimension).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from simtrain.cost.collectives import CollectiveResult, LogicalTopology, collective_time
from simtrain.errors import SpecError
from simtrain.parallel import placement as _pl
from simtrain.parallel.multislice import multislice_dims
from simtrain.parallel.placement import torus_axis_wraps

__all__ = [
    "GroupPlacement", "DEFAULT_RANK_ORDER", "DEFAULT_LEAF_PORTS", "group_placement", "group_topology",
    "p2p_time", "p2p_topology", "pipeline_send_tier", "torus_axis_wraps", "rank_strides",
]

DEFAULT_RANK_ORDER = ("tp", "cp", "ep", "dp", "pp")
DEFAULT_LEAF_PORTS = 32
"""Down-ports of one leaf (rail) switch: 32 as on a 64-port NDR leaf split 32 down / 32 up."""
_AXES = frozenset(DEFAULT_RANK_ORDER)


@dataclass(frozen=True, slots=True)
class GroupPlacement:
    """Where rank 0's ``axis`` group lies: its size, members per node, nodes spanned, topology."""

    axis: str
    size: int
    devices_per_node: int
    nodes_spanned: int
    sub_axes: tuple[tuple[int, int], ...]
    """(size, rank stride) of each mixed-radix part of the group (one part except for ep)."""
    topology: LogicalTopology


# ----------------------------------------------------------------------------------------------
# Rank arithmetic
# ----------------------------------------------------------------------------------------------
def _degrees(layout, rank_order) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """(tp, cp, ep, dp, pp) and the rank order, from any object with those attributes or a mapping."""
    get = layout.get if isinstance(layout, dict) else (lambda k, d=1: getattr(layout, k, d))
    deg = tuple(int(get(a, 1) or 1) for a in ("tp", "cp", "ep", "dp", "pp"))
    order = rank_order if rank_order is not None else get("order", None) or get("rank_order", None)
    order = DEFAULT_RANK_ORDER if order is None else tuple(order.split("-") if isinstance(order, str) else order)
    if sorted(order) != sorted(DEFAULT_RANK_ORDER):
        raise SpecError.one(None, "rank_order", f"must name each of tp, cp, ep, dp, pp once, got {order!r}")
    tp, cp, ep, dp, pp = deg
    if min(deg) < 1:
        raise SpecError.one(None, "layout", f"parallel degrees must be >= 1, got {dict(zip(('tp', 'cp', 'ep', 'dp', 'pp'), deg, strict=False))}")
    if (dp * cp) % ep:
        raise SpecError.one(None, "ep", f"ep={ep} must divide dp × cp = {dp} × {cp}")
    return deg, order


def rank_strides(degrees: tuple[int, ...], order: tuple[str, ...]) -> dict[str, tuple[int, int]]:
    """(size, stride) of tp, cp, dp, pp in the rank numbering (ep is nested in cp × dp)."""
    size = dict(zip(("tp", "cp", "ep", "dp", "pp"), degrees, strict=False))
    out, acc = {}, 1
    for a in order:
        if a != "ep":
            out[a] = (size[a], acc)
            acc *= size[a]
    return out


def _sub_axes(degrees, order, axis) -> tuple[tuple[int, int], ...]:
    strides = rank_strides(degrees, order)
    if axis != "ep":
        return (strides[axis],)
    need, parts = degrees[2], []
    for a in (x for x in order if x in ("cp", "dp")):
        size, stride = strides[a]
        take = math.gcd(need, size)
        if take > 1:
            parts.append((take, stride))
            need //= take
    if need != 1:
        raise SpecError.one(None, "ep", f"ep={degrees[2]} cannot be carved out of cp × dp = "
                            f"{degrees[1]} × {degrees[3]} as a block of ranks")
    return tuple(parts) or ((1, 1),)


def _members(sub_axes) -> np.ndarray:
    ranks = np.zeros(1, dtype=np.int64)
    for size, stride in sub_axes:
        ranks = (ranks[:, None] + np.arange(size, dtype=np.int64)[None, :] * stride).ravel()
    return ranks


# ----------------------------------------------------------------------------------------------
# Public API
# ----------------------------------------------------------------------------------------------
def group_placement(cluster, layout, axis: str, rank_order=None, *, leaf_ports: int = DEFAULT_LEAF_PORTS,
                    in_network_reduction: bool = False) -> GroupPlacement:
    """Place rank 0's ``axis`` group of ``layout`` (tp/cp/ep/dp/pp degrees) on ``cluster``.

    ``rank_order`` ("tp-cp-ep-dp-pp", innermost first) defaults to the layout's own ``order`` or the
    default. ``in_network_reduction`` marks NVSwitch / fat-tree tiers as NVLS/SHARP-capable.
    """
    axis = str(getattr(axis, "value", axis))
    if axis not in _AXES:
        raise SpecError.one(None, "axis", f"must be one of tp, cp, ep, dp, pp, got {axis!r}")
    degrees, order = _degrees(layout, rank_order)
    world = degrees[0] * degrees[1] * degrees[3] * degrees[4]
    if world > cluster.devices_count:
        raise SpecError.one(None, "layout", f"tp × cp × dp × pp = {world} exceeds the cluster's "
                            f"{cluster.devices_count} devices")
    if leaf_ports < 1:
        raise SpecError.one(None, "leaf_ports", f"must be >= 1, got {leaf_ports!r}")
    sig = _pl.cluster_signature(cluster)
    return _place_cached(sig, degrees, order, axis, int(leaf_ports), bool(in_network_reduction))


def group_topology(cluster, layout, axis: str, rank_order=None, **options) -> LogicalTopology:
    """The :class:`LogicalTopology` the ``axis`` group sees (see :func:`group_placement`)."""
    return group_placement(cluster, layout, axis, rank_order, **options).topology


@lru_cache(maxsize=4096)
def _place_cached(sig, degrees, order, axis, leaf_ports, innet) -> GroupPlacement:
    sub = _sub_axes(degrees, order, axis)
    members = _members(sub)
    size = int(members.size)
    if sig.network.topology == "torus" and sig.network.slices_count > 1:
        dims = multislice_dims(members, sig)
        per_node, nodes = size, 1
    elif sig.network.topology == "torus":
        dims = _pl.torus_dims_of(members, sig.network.torus_dims, sig.network.link, sig.device)
        per_node, nodes = size, 1
    else:
        per_node, nodes, dims = _pl.node_dims(members, sig, leaf_ports, innet)
    topo = LogicalTopology(tuple(dims), base_latency_s=sig.base_latency_s, step_overhead_s=sig.step_overhead_s,
                           bandwidth_fraction=sig.bandwidth_fraction, latency_scale=sig.latency_scale,
                           name=f"{axis}{size}")
    return GroupPlacement(axis, size, per_node, nodes, sub, topo)


def pipeline_send_tier(cluster, layout, rank_order=None) -> str:
    """"fabric" when adjacent pipeline stages share a node, else "network" (always "network" on a
    torus network: neighbouring stages talk over ICI)."""
    degrees, order = _degrees(layout, rank_order)
    stride = rank_strides(degrees, order)["pp"][1]
    sig = _pl.cluster_signature(cluster)
    if sig.network.topology == "torus":
        return "network"
    return "fabric" if stride < sig.devices_per_node else "network"


def p2p_topology(cluster, src_tier: str = "network") -> LogicalTopology:
    """Two ranks joined by one ``src_tier`` path: "fabric" (same node: the node's fabric, e.g. every
    NVLink of a GPU through NVSwitch, one link on a mesh or torus) or "network" (one NIC each)."""
    tier = str(src_tier)
    if tier not in ("fabric", "network"):
        raise SpecError.one(None, "src_tier", f"must be 'fabric' or 'network', got {src_tier!r}")
    return _pl.p2p_topology_cached(_pl.cluster_signature(cluster), tier)


def p2p_time(message_bytes: float, cluster, src_tier: str = "network", efficiency=None) -> CollectiveResult:
    """A pipeline send of ``message_bytes`` between adjacent stages: α + S / B over one path of
    ``src_tier`` (same node → fabric link, else NIC); the device's link efficiency applies."""
    return collective_time("send_recv", message_bytes, p2p_topology(cluster, src_tier), efficiency=efficiency)
