"""TPU multislice: several ICI-torus slices joined by the data-centre network (DCN).

Google's multislice training runs data parallelism across slices over the DCN while everything inside
a slice uses ICI (cloud.google.com/tpu/docs/multislice-introduction: "devices within a slice
communicate over ICI, devices across slices over DCN"). For a group spanning slices the logical
topology is the slice's torus axes (innermost) plus one DCN dimension; the collective layer's
hierarchical algorithm then does what the JAX / XLA multislice all-reduce does: reduce-scatter inside
each slice over ICI, all-reduce the 1/s shard across slices over DCN, all-gather inside the slice
(ASTRA-sim's dimension-ordered collective; Rashidi et al., ISPASS 2020).

DCN bandwidth per chip: when a data-parallel gradient sync runs, every chip of a host sends its shard at
once, so one chip's share of the DCN is the host's DCN rate over its chips:
``B_dcn(chip) = dcn_links_per_node × NIC rate / chips per host`` (SB-TPU: DCN ≈ 2.5e10 B/s per host;
GCP-V5P: 50 Gbps per chip, hardware.md §3).
"""

from __future__ import annotations

import math

import numpy as np

from simtrain.cost.collectives import Dimension
from simtrain.parallel.placement import torus_dims_of

__all__ = ["multislice_dims", "dcn_dimension", "dcn_bytes_per_s_per_chip"]


def dcn_bytes_per_s_per_chip(sig) -> float:
    """One chip's per-direction share of its host's DCN ports (all chips sync at once)."""
    net = sig.network
    return net.dcn_per_node * net.dcn.bandwidth_bytes_per_s / sig.devices_per_node


def dcn_dimension(sig, slices: int) -> Dimension:
    """The DCN between ``slices`` slices: a switched network (a ``switch`` dimension), one NIC hop
    plus the data-centre switch hops (``dcn_latency_s``) per step."""
    net = sig.network
    return Dimension(int(slices), dcn_bytes_per_s_per_chip(sig), net.dcn.latency_s + net.dcn_latency_s,
                     "switch", net.dcn.name)


def multislice_dims(members: np.ndarray, sig) -> list[Dimension]:
    """Torus axes of the group's members in its first slice, plus a DCN dimension when it spans slices.
    A group spread unevenly over slices is one DCN dimension of all its members (conservative)."""
    net = sig.network
    per_slice = math.prod(net.torus_dims)
    slice_of = members // per_slice
    slices, counts = np.unique(slice_of, return_counts=True)
    if slices.size > 1 and int(counts.min()) != int(counts.max()):
        return [dcn_dimension(sig, int(members.size))]
    local = members[slice_of == slices[0]] % per_slice
    dims = torus_dims_of(local, net.torus_dims, net.link, sig.device) if local.size > 1 else []
    if slices.size > 1:
        dims.append(dcn_dimension(sig, int(slices.size)))
    return dims
