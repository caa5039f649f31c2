"""Hardware schemas: Device, Link, Node, Cluster (pydantic v2, frozen, strict, every number sourced).

A spec file gives datasheet numbers with their unit strings and a ``source``; everything else is
derived by named formulas (``MatrixUnit.derived_peak_flops_per_s``, ``Link.per_direction_bytes_per_s``).
References between files are by library name ("device: a100-sxm4-80gb") and are resolved on load.
"""

from __future__ import annotations

import math
import os
from typing import Annotated, ClassVar, Literal

from pydantic import Field, ValidationError, model_validator

from simtrain.errors import SpecError, SpecIssue
from simtrain.specs.base import Bytes, BytesPerS, Seconds, Sourced, Spec, spec_error_from_validation
from simtrain.specs.components import (  # noqa: F401  (re-exported: the public home of every hardware schema)
    Device,
    DeviceRef,
    Fraction,
    Link,
    LinkRef,
    MatrixUnit,
    MemoryTier,
    Name,
    resolve_ref,
)
from simtrain.specs.efficiency import ComputeCurve, Efficiency  # noqa: F401  (re-exported)

__all__ = [
    "ComputeCurve", "Efficiency", "MatrixUnit", "MemoryTier", "Device", "Link", "Storage", "Host",
    "Fabric", "Node", "Network", "Cluster",
]



_MAX_NODES = 1_000_000  # the most nodes a cluster spec (or a node count asked for) may have

class Storage(Spec):
    """Local NVMe (or a shared file system) that feeds the input pipeline."""

    read_bandwidth_bytes_per_s: Sourced[BytesPerS]
    read_iops: Sourced[Annotated[float, Field(gt=0)]] | None = None
    drives_count: Annotated[int, Field(ge=1, le=64)] = 1


class Host(Spec):
    """The CPU side of a node: cores for data loading, DRAM, PCIe to each device, storage."""

    cpu_model: str | None = None
    cpu_cores: Sourced[Annotated[int, Field(ge=1, le=4096)]]
    dram_capacity_bytes: Sourced[Bytes] | None = None
    dram_bandwidth_bytes_per_s: Sourced[BytesPerS]
    pcie_link: LinkRef | None = None
    """Host-to-device link, one per device (None for a CPU-only node)."""
    nvme: Storage | None = None
    network_storage_bandwidth_bytes_per_s: Sourced[BytesPerS] | None = None


Topology = Literal["nvswitch", "pcie_tree", "full_mesh", "torus", "ring", "wafer", "none"]


class Fabric(Spec):
    """How the devices of a node are wired together."""

    topology: Topology
    link: LinkRef | None = None
    links_per_device: Annotated[int, Field(ge=1, le=256)] = 1
    torus_dims: list[Annotated[int, Field(ge=1)]] | None = None
    switch_latency_s: Sourced[Seconds] | None = None

    @model_validator(mode="after")
    def _check(self) -> Fabric:
        if self.topology != "none" and self.link is None:
            raise ValueError(f"topology {self.topology!r} needs a link")
        if self.topology == "torus" and not self.torus_dims:
            raise ValueError("a torus fabric needs torus_dims")
        return self

    @property
    def per_device_bytes_per_s(self) -> float:
        """Per-direction bandwidth out of one device into the fabric (all its links together)."""
        return 0.0 if self.link is None else self.link.per_direction_bytes_per_s * self.links_per_device


class Node(Spec):
    """A server: ``devices_count`` devices of one kind, their fabric, and the host."""

    library_kind: ClassVar[str | None] = "node"

    name: Name
    description: str = ""
    device: DeviceRef
    devices_count: Annotated[int, Field(ge=1, le=4096)]
    fabric: Fabric
    host: Host

    @model_validator(mode="after")
    def _check(self) -> Node:
        if self.fabric.topology == "none" and self.devices_count > 1:
            raise ValueError(f"fabric.topology 'none' cannot connect devices_count={self.devices_count} devices")
        dims = self.fabric.torus_dims
        if dims and math.prod(dims) != self.devices_count:
            raise ValueError(f"fabric.torus_dims {dims} multiply to {math.prod(dims)}, "
                             f"not devices_count={self.devices_count}")
        return self


NetworkTopology = Literal["fat_tree", "rail_optimized", "torus", "wafer_fabric", "none"]


class Network(Spec):
    """The network between nodes."""

    topology: NetworkTopology
    nic_link: LinkRef | None = None
    nics_per_node: Annotated[int, Field(ge=0, le=256)] = 0
    """Scale-out NICs per node (a GB200 NVL72 rack, one node of 72 GPUs, has 72)."""
    oversubscription: Annotated[float, Field(ge=1, le=64)] = 1.0
    """Fat-tree taper: 2.0 means the upper tiers carry half the injection bandwidth."""
    torus_dims: list[Annotated[int, Field(ge=1)]] | None = None
    """For a torus spanning nodes (TPU ICI): chips along each axis, product = total devices."""
    switch_latency_s: Sourced[Seconds] | None = None
    slices_count: Annotated[int, Field(ge=1, le=4096)] = 1
    """TPU multislice: ``torus_dims`` is one slice (its ICI torus); ``slices_count`` such slices are joined
    by the data-centre network (DCN), over which data parallelism across slices runs."""
    dcn_link: LinkRef | None = None
    """The host's DCN port between slices (one NIC), used only when ``slices_count`` > 1."""
    dcn_links_per_node: Annotated[int, Field(ge=0, le=64)] = 0
    dcn_latency_s: Sourced[Seconds] | None = None
    """Switch hops across the data-centre network between slices, added to the NIC's latency."""

    @model_validator(mode="after")
    def _check(self) -> Network:
        if self.topology != "none" and self.nic_link is None:
            raise ValueError(f"network topology {self.topology!r} needs nic_link")
        if self.slices_count > 1 and (self.topology != "torus" or self.dcn_link is None or self.dcn_links_per_node < 1):
            raise ValueError("slices_count > 1 (multislice) needs a torus network, dcn_link and dcn_links_per_node >= 1")
        if self.topology in ("fat_tree", "rail_optimized") and self.nics_per_node < 1:
            raise ValueError(f"network topology {self.topology!r} needs nics_per_node >= 1")
        if self.topology == "torus" and not self.torus_dims:
            raise ValueError("a torus network needs torus_dims")
        return self

    @property
    def per_node_bytes_per_s(self) -> float:
        return 0.0 if self.nic_link is None else self.nic_link.per_direction_bytes_per_s * self.nics_per_node

    @property
    def dcn_per_node_bytes_per_s(self) -> float:
        """Per-direction DCN bandwidth out of one host (all its DCN NICs)."""
        return 0.0 if self.dcn_link is None else self.dcn_link.per_direction_bytes_per_s * self.dcn_links_per_node


class Cluster(Spec):
    """``nodes_count`` identical nodes on a network."""

    library_kind: ClassVar[str | None] = "cluster"

    name: Name
    description: str = ""
    node: Annotated[Node, resolve_ref("node")]
    nodes_count: Annotated[int, Field(ge=1, le=_MAX_NODES)]
    network: Network

    @model_validator(mode="after")
    def _check(self) -> Cluster:
        if self.network.topology == "none" and self.nodes_count > 1:
            raise ValueError(f"network.topology 'none' cannot join nodes_count={self.nodes_count} nodes")
        dims, slices = self.network.torus_dims, self.network.slices_count
        if dims and math.prod(dims) * slices != self.devices_count:
            per = "" if slices == 1 else f" × {slices} slices"
            raise ValueError(f"network.torus_dims {dims}{per} multiply to {math.prod(dims) * slices}, not the "
                             f"{self.devices_count} devices ({self.nodes_count} nodes × "
                             f"{self.node.devices_count} devices)")
        return self

    @property
    def devices_count(self) -> int:
        return self.nodes_count * self.node.devices_count

    @property
    def device(self) -> Device:
        return self.node.device

    def with_nodes(self, nodes: int) -> Cluster:
        """The same cluster with ``nodes`` nodes. A torus keeps its rank (2D/3D) and is refactored
        into the most balanced dims whose product is the new device count."""
        if isinstance(nodes, bool) or not isinstance(nodes, int) or not 1 <= nodes <= _MAX_NODES:
            # refused before the torus is refactored (a huge count would factorise for ever)
            shown = f"{nodes:,}" if isinstance(nodes, int) and not isinstance(nodes, bool) else repr(nodes)
            raise SpecError.one(None, "nodes", f"{shown} nodes of {self.name!r}: a cluster has 1 to {_MAX_NODES:,}")
        data = self.model_dump(mode="python")
        data["nodes_count"] = nodes
        net = self.network
        per_slice = self.nodes_count // net.slices_count
        if net.slices_count > 1 and nodes >= per_slice:  # multislice: keep the slice shape, count slices
            if nodes % per_slice:
                raise ValueError(f"{self.name} is built of {per_slice}-host slices: nodes must be a multiple "
                                 f"of {per_slice} (or fewer, one smaller slice), got {nodes}")
            data["network"]["slices_count"] = nodes // per_slice
        elif net.torus_dims:  # one torus (a smaller slice of a multislice cluster too)
            data["network"]["slices_count"] = 1
            data["network"]["torus_dims"] = balanced_dims(nodes * self.node.devices_count, len(net.torus_dims))
        data["node"] = self.node
        data["network"] = {**data["network"], "nic_link": net.nic_link, "dcn_link": net.dcn_link}
        return Cluster.model_validate(data)

    def with_power_limit(self, watts: float | str | None, source: str = "Cluster.with_power_limit") -> Cluster:
        """The same cluster with every device run under a board power limit of ``watts`` (a number in W
        or a unit string, "500 W"; None removes the limit): ``Device.power_limit_w``, validated against
        the device's ``tdp_w`` and ``idle_power_w``. Compute slows by the cube law
        (cost/ceilings.py ``power_clock_fraction``); memory and links do not."""
        device = self.node.device
        limit = None if watts is None else {"value": watts, "source": source, "mark": "U"}
        data = {**device.model_dump(mode="python", exclude={"power_limit_w"}), "power_limit_w": limit}
        data.update({"efficiency": device.efficiency, "host_link": device.host_link})
        try:
            new = Device.model_validate(data)
        except ValidationError as err:
            raise _power_limit_error(err, self.name) from None
        return self.model_copy(update={"node": self.node.model_copy(update={"device": new})})

    @classmethod
    def single(cls, device: Device, name: str | None = None) -> Cluster:
        """One device, no network: e.g. this machine's CPU, or one calibrated GPU (a Device, or a
        device library name or path)."""
        if isinstance(device, (str, os.PathLike)):
            from simtrain.specs.library import load_device
            device = load_device(device)
        if not isinstance(device, Device):
            raise SpecError.one(None, "device", f"Cluster.single takes a Device or a device name, got "
                                f"{type(device).__name__}")
        host = Host(cpu_cores=Sourced[int](value=1, source="Cluster.single placeholder", mark="U"),
                    dram_bandwidth_bytes_per_s=Sourced[float](
                        value=device.memory_bandwidth_bytes_per_s, source="Cluster.single placeholder", mark="U"))
        node = Node(name=f"{device.name}-single", device=device, devices_count=1,
                    fabric=Fabric(topology="none"), host=host)
        return cls(name=name or f"{device.name}-single", node=node, nodes_count=1,
                   network=Network(topology="none"))


def _power_limit_error(err: ValidationError, cluster: str) -> SpecError:
    """A refused power limit as a spec error at ``node.device.power_limit_w`` (the device was valid
    before, so every issue is the limit's; the cross-field checks have no field path of their own)."""
    at = "node.device.power_limit_w"
    issues = spec_error_from_validation(err, None, prefix="node.device").issues
    return SpecError([SpecIssue(f"cluster {cluster}", i.field if i.field.startswith(at) else at, i.reason)
                      for i in issues])


def balanced_dims(total: int, rank: int) -> list[int]:
    """The factorisation of ``total`` into ``rank`` factors closest to equal (largest first)."""
    best: list[int] | None = None

    def search(remaining: int, k: int, prefix: list[int]) -> None:
        nonlocal best
        if k == 1:
            cand = sorted(prefix + [remaining], reverse=True)
            if best is None or (cand[0] - cand[-1], cand) < (best[0] - best[-1], best):
                best = cand
            return
        for f in _divisors(remaining):
            search(remaining // f, k - 1, prefix + [f])

    search(total, rank, [])
    return best or [total]


def _divisors(n: int) -> list[int]:
    """Every divisor of ``n``, in O(√n) (the torus search visits each of them, not every integer up to n)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)})
