"""Hardware schemas: Device, Link, Node, Cluster (pydantic v2, frozen, strict, every number sourced).

A spec file gives datasheet numbers with their unit strings and a ``source``; everything else is
derived by named formulas (``MatrixUnit.derived_peak_flops_per_s``, ``Link.per_direction_bytes_per_s``).
References between files are by library name ("device: a100-sxm4-80gb") and are resolved on load.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, Field, model_validator

from simtrain.errors import SpecError
from simtrain.glossary import DeviceKind, DType, LinkKind
from simtrain.specs.base import (
    Bytes,
    BytesPerS,
    DollarsPerHour,
    FlopsPerS,
    Hertz,
    Seconds,
    Sourced,
    Spec,
    Watts,
)
from simtrain.specs.efficiency import ComputeCurve, Efficiency  # noqa: F401  (re-exported)
from simtrain.specs.library import load_reference

__all__ = [
    "ComputeCurve", "Efficiency", "MatrixUnit", "MemoryTier", "Device", "Link", "Storage", "Host",
    "Fabric", "Node", "Network", "Cluster",
]

Name = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9._-]*$", min_length=1, max_length=80)]
Fraction = Annotated[float, Field(gt=0, le=1)]


# ----------------------------------------------------------------------------------------------
# Device
# ----------------------------------------------------------------------------------------------
class MatrixUnit(Spec):
    """Geometry of the matrix engine, enough to derive the datasheet peak and alignment effects.

    ``derived peak = units_count × fma_per_clock_per_unit × 2 × clock_hz`` (one FMA = 2 FLOPs).
    """

    kind: Literal["tensor_core", "matrix_core", "mxu", "dsp", "ai_engine", "systolic", "simd", "wafer_core", "mme",
                  "neuron_core"]
    """``matrix_core`` is AMD's name (per compute unit); ``dsp`` an FPGA DSP slice at the design clock."""
    units_count: Sourced[Annotated[int, Field(ge=1, le=10_000_000)]]
    fma_per_clock_per_unit: dict[DType, Annotated[float, Field(gt=0, le=1e6)]]
    clock_hz: Sourced[Hertz]
    tile: tuple[int, int, int] | None = None
    """(m, n, k) granularity a matmul must align to for full efficiency (tensor-core tile / MXU)."""
    parallel_tiles: Annotated[int, Field(ge=1)] | None = None
    """How many output tiles run at once (SMs on a GPU): partial last waves lose throughput."""
    source: Annotated[str, Field(min_length=2, max_length=300)] | None = None
    """Where ``fma_per_clock_per_unit`` and ``tile`` come from (they are plain numbers, not Sourced)."""

    @model_validator(mode="after")
    def _check_tile(self) -> MatrixUnit:
        if self.tile is not None and min(self.tile) < 1:
            raise ValueError("tile dims must be >= 1")
        return self

    def derived_peak_flops_per_s(self, dtype: DType) -> float | None:
        fma = self.fma_per_clock_per_unit.get(dtype)
        if fma is None:
            return None
        return self.units_count.value * fma * 2.0 * self.clock_hz.value


class MemoryTier(Spec):
    """One level of the memory hierarchy, fastest first (SRAM/cache ... HBM/DDR)."""

    name: Name
    level: Literal["register", "sram", "cache", "hbm", "ddr", "host", "flash"]
    capacity_bytes: Sourced[Bytes]
    usable_capacity_bytes: Sourced[Bytes] | None = None
    bandwidth_bytes_per_s: Sourced[BytesPerS]
    latency_s: Sourced[Seconds] | None = None

    @model_validator(mode="after")
    def _usable_le_nominal(self) -> MemoryTier:
        u = self.usable_capacity_bytes
        if u is not None and u.value > self.capacity_bytes.value * 1.0000001:
            raise ValueError(f"usable_capacity_bytes ({u.value:.6g} B) exceeds capacity_bytes "
                             f"({self.capacity_bytes.value:.6g} B)")
        return self

    @property
    def usable_bytes(self) -> float:
        return (self.usable_capacity_bytes or self.capacity_bytes).value


class Device(Spec):
    """One accelerator (or CPU socket): dense peaks per dtype, memory tiers, matrix unit, power, price."""

    library_kind: ClassVar[str | None] = "device"

    name: Name
    kind: DeviceKind
    vendor: str | None = None
    description: str = ""
    peak_flops_per_s: dict[DType, Sourced[FlopsPerS]]
    """Dense peak per dtype (never the 2:4-sparse figure). For int8 the value is ops/s."""
    vector_flops_per_s: Sourced[FlopsPerS] | None = None
    """Non-matrix (SIMD / CUDA-core) fp32 rate used by elementwise ops; defaults to the fp32 peak."""
    memory: Annotated[list[MemoryTier], Field(min_length=1, max_length=8)]
    main_memory: Name | None = None
    """Tier that holds weights and activations; the last tier when omitted."""
    matrix_unit: MatrixUnit | None = None
    tdp_w: Sourced[Watts] | None = None
    idle_power_w: Sourced[Watts] | None = None
    price_per_hour: Sourced[DollarsPerHour] | None = None
    efficiency: Efficiency | None = None
    host_link: Name | None = None
    memory_external: MemoryTier | None = None
    """An off-device store the device streams from, not part of its own hierarchy (Cerebras MemoryX:
    weights live there and are streamed in layer by layer; ``bandwidth_bytes_per_s`` is the streaming
    rate into one device, i.e. the system I/O, not the store's internal rate). None for everything else."""
    notes: str | None = None

    @model_validator(mode="after")
    def _check(self) -> Device:
        if not self.peak_flops_per_s:
            raise ValueError("peak_flops_per_s needs at least one dtype")
        names = [t.name for t in self.memory]
        if len(set(names)) != len(names):
            raise ValueError(f"memory tier names must be unique, got {names}")
        if self.main_memory is not None and self.main_memory not in names:
            raise ValueError(f"main_memory {self.main_memory!r} is not one of the memory tiers {names}")
        caps = [t.capacity_bytes.value for t in self.memory]
        if any(b < a for a, b in zip(caps, caps[1:], strict=False)):
            raise ValueError("memory tiers must be ordered fastest/smallest first (capacity non-decreasing)")
        if self.idle_power_w and self.tdp_w and self.idle_power_w.value > self.tdp_w.value:
            raise ValueError("idle_power_w exceeds tdp_w")
        if self.memory_external is not None and self.memory_external.name in names:
            raise ValueError(f"memory_external.name {self.memory_external.name!r} repeats a memory tier name")
        return self

    # --- derived views -------------------------------------------------------------------------
    @property
    def main_tier(self) -> MemoryTier:
        if self.main_memory is None:
            return self.memory[-1]
        return next(t for t in self.memory if t.name == self.main_memory)

    @property
    def memory_capacity_bytes(self) -> float:
        return self.main_tier.capacity_bytes.value

    @property
    def usable_memory_bytes(self) -> float:
        return self.main_tier.usable_bytes

    @property
    def memory_bandwidth_bytes_per_s(self) -> float:
        return self.main_tier.bandwidth_bytes_per_s.value

    def peak(self, dtype: DType | str) -> float | None:
        """Dense peak FLOP/s for ``dtype``; ``None`` when the device has no such path."""
        s = self.peak_flops_per_s.get(DType(dtype))
        return None if s is None else s.value

    @property
    def vector_peak_flops_per_s(self) -> float:
        if self.vector_flops_per_s is not None:
            return self.vector_flops_per_s.value
        for dt in (DType.FP32, DType.BF16, DType.FP16, DType.INT8):
            if dt in self.peak_flops_per_s:
                return self.peak_flops_per_s[dt].value
        return next(iter(self.peak_flops_per_s.values())).value


# ----------------------------------------------------------------------------------------------
# Links, hosts, nodes, clusters
# ----------------------------------------------------------------------------------------------
class Link(Spec):
    """One link (port or lane group). Give exactly one of per-direction or bidirectional bandwidth:
    vendors quote NVLink and ICI as bidirectional totals; NCCL bus bandwidth is per direction."""

    library_kind: ClassVar[str | None] = "link"

    name: Name
    kind: LinkKind
    description: str = ""
    generation: str | None = None
    bandwidth_per_direction_bytes_per_s: Sourced[BytesPerS] | None = None
    bandwidth_bidirectional_bytes_per_s: Sourced[BytesPerS] | None = None
    latency_s: Sourced[Seconds]
    lanes: Annotated[int, Field(ge=1, le=1024)] | None = None

    @model_validator(mode="after")
    def _one_bandwidth(self) -> Link:
        given = [b for b in (self.bandwidth_per_direction_bytes_per_s, self.bandwidth_bidirectional_bytes_per_s)
                 if b is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of bandwidth_per_direction_bytes_per_s and "
                             "bandwidth_bidirectional_bytes_per_s")
        return self

    @property
    def per_direction_bytes_per_s(self) -> float:
        """Per-direction bandwidth: the bidirectional total halved (full duplex links)."""
        if self.bandwidth_per_direction_bytes_per_s is not None:
            return self.bandwidth_per_direction_bytes_per_s.value
        return self.bandwidth_bidirectional_bytes_per_s.value / 2.0

    @property
    def latency(self) -> float:
        return self.latency_s.value


def _resolve(kind: str):
    """Before-validator: a library name (or a path relative to the spec file, see
    :func:`simtrain.specs.library.resolve_reference`) is loaded; a mapping is validated inline."""
    def resolve(value: Any) -> Any:
        if isinstance(value, str):
            try:
                return load_reference(kind, value)
            except SpecError as err:  # reword as a plain reason: this field's path is added by pydantic
                raise ValueError("; ".join(f"{i.file}: {i.field or '<document>'}: {i.reason}" if i.file
                                           else i.reason for i in err.issues)) from None
        return value
    return BeforeValidator(resolve)


LinkRef = Annotated[Link, _resolve("link")]
DeviceRef = Annotated[Device, _resolve("device")]


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
    nics_per_node: Annotated[int, Field(ge=0, le=64)] = 0
    oversubscription: Annotated[float, Field(ge=1, le=64)] = 1.0
    """Fat-tree taper: 2.0 means the upper tiers carry half the injection bandwidth."""
    torus_dims: list[Annotated[int, Field(ge=1)]] | None = None
    """For a torus spanning nodes (TPU ICI): chips along each axis, product = total devices."""
    switch_latency_s: Sourced[Seconds] | None = None

    @model_validator(mode="after")
    def _check(self) -> Network:
        if self.topology != "none" and self.nic_link is None:
            raise ValueError(f"network topology {self.topology!r} needs nic_link")
        if self.topology in ("fat_tree", "rail_optimized") and self.nics_per_node < 1:
            raise ValueError(f"network topology {self.topology!r} needs nics_per_node >= 1")
        if self.topology == "torus" and not self.torus_dims:
            raise ValueError("a torus network needs torus_dims")
        return self

    @property
    def per_node_bytes_per_s(self) -> float:
        return 0.0 if self.nic_link is None else self.nic_link.per_direction_bytes_per_s * self.nics_per_node


class Cluster(Spec):
    """``nodes_count`` identical nodes on a network."""

    library_kind: ClassVar[str | None] = "cluster"

    name: Name
    description: str = ""
    node: Annotated[Node, _resolve("node")]
    nodes_count: Annotated[int, Field(ge=1, le=1_000_000)]
    network: Network

    @model_validator(mode="after")
    def _check(self) -> Cluster:
        if self.network.topology == "none" and self.nodes_count > 1:
            raise ValueError(f"network.topology 'none' cannot join nodes_count={self.nodes_count} nodes")
        dims = self.network.torus_dims
        if dims and math.prod(dims) != self.devices_count:
            raise ValueError(f"network.torus_dims {dims} multiply to {math.prod(dims)}, not the "
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
        data = self.model_dump(mode="python")
        data["nodes_count"] = nodes
        net = self.network
        if net.torus_dims:
            data["network"]["torus_dims"] = balanced_dims(nodes * self.node.devices_count, len(net.torus_dims))
        data["node"] = self.node
        data["network"] = {**data["network"], "nic_link": net.nic_link}
        return Cluster.model_validate(data)

    @classmethod
    def single(cls, device: Device, name: str | None = None) -> Cluster:
        """One device, no network: e.g. this machine's CPU, or one calibrated GPU."""
        host = Host(cpu_cores=Sourced[int](value=1, source="Cluster.single placeholder", mark="U"),
                    dram_bandwidth_bytes_per_s=Sourced[float](
                        value=device.memory_bandwidth_bytes_per_s, source="Cluster.single placeholder", mark="U"))
        node = Node(name=f"{device.name}-single", device=device, devices_count=1,
                    fabric=Fabric(topology="none"), host=host)
        return cls(name=name or f"{device.name}-single", node=node, nodes_count=1,
                   network=Network(topology="none"))


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
        for f in range(1, remaining + 1):
            if remaining % f == 0:
                search(remaining // f, k - 1, prefix + [f])

    search(total, rank, [])
    return best or [total]
