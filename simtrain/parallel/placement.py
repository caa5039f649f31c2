"""Hardware side of placement: a cluster reduced to plain hashable numbers, and the dimensions a set of
ranks spans inside a node, between nodes and on a torus. Used by :mod:`simtrain.parallel.topology`
(whose docstring states the rules); kept free of pydantic so results can be cached by value."""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

import numpy as np

from simtrain.cost.collectives import DEFAULT_BASE_LATENCY_S, Dimension, LogicalTopology
from simtrain.errors import SpecError

__all__ = ["LinkSig", "FabricSig", "NetworkSig", "ClusterSig", "cluster_signature", "node_dims",
           "torus_dims_of", "p2p_topology_cached"]


class LinkSig(NamedTuple):
    name: str
    bandwidth_bytes_per_s: float
    """Per direction."""
    latency_s: float


class FabricSig(NamedTuple):
    topology: str
    link: LinkSig | None
    links_per_device: int
    torus_dims: tuple[int, ...] | None
    switch_latency_s: float


class NetworkSig(NamedTuple):
    topology: str
    link: LinkSig | None
    nics_per_node: int
    oversubscription: float
    torus_dims: tuple[int, ...] | None
    switch_latency_s: float
    slices_count: int = 1
    """TPU multislice: ``torus_dims`` is one slice; slices are joined by the DCN (parallel/multislice.py)."""
    dcn: LinkSig | None = None
    dcn_per_node: int = 0
    dcn_latency_s: float = 0.0


class DeviceSig(NamedTuple):
    name: str
    kind: str


class ClusterSig(NamedTuple):
    devices_per_node: int
    nodes_count: int
    fabric: FabricSig
    network: NetworkSig
    device: DeviceSig
    bandwidth_fraction: float
    latency_scale: float
    base_latency_s: float
    step_overhead_s: float


def torus_axis_wraps(device, axis_len: int) -> bool:
    """Whether a torus axis of ``axis_len`` chips has its wraparound link (hardware.md §3, [SB-TPU]):
    TPU v5e/v6e only on a full 16-chip axis; other TPUs (v4, v5p) when the length is a multiple of 4;
    a non-TPU torus (e.g. Trainium's) always."""
    if axis_len < 3:
        return False
    name = getattr(device, "name", "")
    kind = getattr(device, "kind", None)
    if str(getattr(kind, "value", kind)) != "tpu":
        return True
    if any(tag in name for tag in ("v5e", "v5lite", "v6e")):
        return axis_len == 16
    return axis_len % 4 == 0


def _link(link) -> LinkSig | None:
    return None if link is None else LinkSig(link.name, link.per_direction_bytes_per_s, link.latency)


def _value(sourced, default: float = 0.0) -> float:
    return default if sourced is None else float(sourced.value)


def _efficiency_numbers(device) -> tuple[float, float, float, float]:
    """(bandwidth fraction, latency scale, base latency, per-step overhead) from the device's efficiency
    (its own block, else the default profile of its kind); raw hardware when there is none."""
    try:
        from simtrain.cost.compute import device_efficiency
        eff = device_efficiency(device)
    except (SpecError, ImportError, KeyError):
        return 1.0, 1.0, DEFAULT_BASE_LATENCY_S, 0.0
    extra = eff.extra
    return (eff.link_bandwidth_fraction, eff.link_latency_scale,
            float(extra.get("collective_base_latency_s", DEFAULT_BASE_LATENCY_S)),
            float(extra.get("collective_step_overhead_s", 0.0)))


def _build_signature(cluster) -> ClusterSig:
    node, net = cluster.node, cluster.network
    fab = node.fabric
    fabric = FabricSig(fab.topology, _link(fab.link), fab.links_per_device,
                       tuple(fab.torus_dims) if fab.torus_dims else None, _value(fab.switch_latency_s))
    network = NetworkSig(net.topology, _link(net.nic_link), net.nics_per_node, float(net.oversubscription),
                         tuple(net.torus_dims) if net.torus_dims else None, _value(net.switch_latency_s),
                         net.slices_count, _link(net.dcn_link), net.dcn_links_per_node, _value(net.dcn_latency_s))
    device = DeviceSig(node.device.name, node.device.kind.value)
    return ClusterSig(node.devices_count, cluster.nodes_count, fabric, network, device,
                      *_efficiency_numbers(node.device))


_SIGNATURES: dict[int, tuple[object, ClusterSig]] = {}


def cluster_signature(cluster) -> ClusterSig:
    """The cluster's placement-relevant numbers, memoised per cluster object (the memo keeps the object
    alive, so its id cannot be reused while the entry exists)."""
    hit = _SIGNATURES.get(id(cluster))
    if hit is not None and hit[0] is cluster:
        return hit[1]
    if len(_SIGNATURES) >= 512:
        _SIGNATURES.clear()
    sig = _build_signature(cluster)
    _SIGNATURES[id(cluster)] = (cluster, sig)
    return sig


# ----------------------------------------------------------------------------------------------
# Torus axes
# ----------------------------------------------------------------------------------------------
def torus_dims_of(ranks: np.ndarray, lengths, link: LinkSig, device, always_wrap: bool = False,
                  links_per_neighbour: int = 1) -> list[Dimension]:
    """One ``ring`` dimension per torus axis the ranks span (x fastest in the rank numbering).

    A neighbour link carries ``links_per_neighbour × link`` per direction; members spaced ``g`` chips
    apart along an axis share each link with g − 1 other groups and pay g hops per step. An axis the
    group covers whole has its wraparound when :func:`torus_axis_wraps`
    says so (a fabric torus always wraps); otherwise it is a line. Ranks that do not form a box are
    modelled as one line of all of them at one link's rate (conservative).
    """
    per_link = link.bandwidth_bytes_per_s * links_per_neighbour
    coords, acc = [], 1
    for length in lengths:
        coords.append((ranks // acc) % length)
        acc *= length
    spans = [np.unique(c) for c in coords]
    if int(np.prod([len(s) for s in spans])) != ranks.size:
        return [Dimension(int(ranks.size), per_link, link.latency_s, "ring", link.name,
                          ring_bandwidth_bytes_per_s=per_link, pair_bandwidth_bytes_per_s=per_link,
                          wraparound=False)]
    dims = []
    for length, vals in zip(lengths, spans, strict=False):
        c = len(vals)
        if c < 2:
            continue
        gap = int(np.max(np.diff(vals)))
        wrap = c * gap == length and (always_wrap and length > 2 or torus_axis_wraps(device, length))
        pair = per_link / gap
        dims.append(Dimension(c, 2 * pair, link.latency_s * gap, "ring", link.name,
                              ring_bandwidth_bytes_per_s=(2 if wrap else 1) * pair,
                              pair_bandwidth_bytes_per_s=pair, wraparound=wrap))
    return dims


# ----------------------------------------------------------------------------------------------
# Node fabric and network
# ----------------------------------------------------------------------------------------------
def _fabric_dims(sig: ClusterSig, local: np.ndarray, innet: bool) -> list[Dimension]:
    fab, k, G = sig.fabric, int(local.size), sig.devices_per_node
    link = fab.link
    lat = link.latency_s + fab.switch_latency_s
    if fab.topology in ("nvswitch", "wafer"):
        return [Dimension(k, link.bandwidth_bytes_per_s * fab.links_per_device, lat, "switch", link.name,
                          in_network_reduction=innet and fab.topology == "nvswitch")]
    if fab.topology == "pcie_tree":
        return [Dimension(k, link.bandwidth_bytes_per_s, lat, "switch", link.name)]
    if fab.topology == "full_mesh":
        per_peer = link.bandwidth_bytes_per_s * max(1, fab.links_per_device // max(1, G - 1))
        return [Dimension(k, per_peer * (k - 1), lat, "mesh", link.name, pair_bandwidth_bytes_per_s=per_peer)]
    lengths = fab.torus_dims if fab.topology == "torus" else (G,)
    active = sum(1 for n in lengths if n > 1) or 1
    per_neighbour = max(1, fab.links_per_device // (2 * active))
    return torus_dims_of(local, lengths, link, sig.device, always_wrap=True, links_per_neighbour=per_neighbour)


def _network_dim(sig: ClusterSig, size: int, k: int, nodes: np.ndarray, leaf_ports: int,
                 innet: bool) -> Dimension:
    """The inter-node dimension of a group with ``k`` members on each of ``nodes``."""
    net = sig.network
    link = net.link
    if net.topology == "wafer_fabric":  # SwarmX: every port of the system feeds its one wafer
        depth = max(1, (len(nodes) - 1).bit_length())
        return Dimension(size, net.nics_per_node * link.bandwidth_bytes_per_s / k,
                         link.latency_s + depth * net.switch_latency_s, "tree", link.name,
                         in_network_reduction=True)
    leaf_nodes = leaf_ports if net.topology == "rail_optimized" else max(1, leaf_ports // net.nics_per_node)
    one_leaf = int(nodes.min()) // leaf_nodes == int(nodes.max()) // leaf_nodes
    share = min(k, net.nics_per_node) * link.bandwidth_bytes_per_s / k
    if not one_leaf:
        share /= net.oversubscription
    hops = 1 if one_leaf else 3
    return Dimension(size, share, link.latency_s + hops * net.switch_latency_s, "switch", link.name,
                     in_network_reduction=innet)


def node_dims(members: np.ndarray, sig: ClusterSig, leaf_ports: int, innet: bool):
    """(members per node, nodes spanned, dimensions) of a group on a node-and-network cluster."""
    G = sig.devices_per_node
    node_ids = members // G
    nodes, counts = np.unique(node_ids, return_counts=True)
    k, n_nodes = int(counts.max()), int(nodes.size)
    if n_nodes > 1 and sig.network.topology == "none":
        raise SpecError.one(None, "layout", "the group spans several nodes but the cluster has no network")
    if int(counts.min()) != k:  # irregular: one flat network dimension, NIC share of the fullest node
        return k, n_nodes, [_network_dim(sig, int(members.size), k, nodes, leaf_ports, innet)]
    dims = []
    if k > 1:
        dims += _fabric_dims(sig, members[node_ids == nodes[0]] % G, innet)
    if n_nodes > 1:
        dims.append(_network_dim(sig, n_nodes, k, nodes, leaf_ports, innet))
    return k, n_nodes, dims


@lru_cache(maxsize=1024)
def p2p_topology_cached(sig: ClusterSig, tier: str) -> LogicalTopology:
    """Two ranks over one path of ``tier`` (see :func:`simtrain.parallel.topology.p2p_topology`)."""
    fab, net = sig.fabric, sig.network
    if tier == "fabric":
        if fab.link is None:
            raise SpecError.one(None, "src_tier", "the node has no fabric between devices")
        link, lat = fab.link, fab.link.latency_s + fab.switch_latency_s
        bw = link.bandwidth_bytes_per_s
        if fab.topology in ("nvswitch", "wafer"):
            bw *= fab.links_per_device
        elif fab.topology == "full_mesh":
            bw *= max(1, fab.links_per_device // max(1, sig.devices_per_node - 1))
    else:
        if net.link is None:
            raise SpecError.one(None, "src_tier", "the cluster has no network between nodes")
        link = net.link
        lat = link.latency_s + (0.0 if net.topology == "torus" else net.switch_latency_s)
        bw = link.bandwidth_bytes_per_s
    dim = Dimension(2, bw, lat, "switch", link.name)
    return LogicalTopology((dim,), base_latency_s=sig.base_latency_s, step_overhead_s=sig.step_overhead_s,
                           bandwidth_fraction=sig.bandwidth_fraction, latency_scale=sig.latency_scale,
                           name=f"p2p-{tier}")
