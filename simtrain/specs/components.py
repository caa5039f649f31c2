"""The library's leaf parts: Device (with its matrix unit and memory tiers) and Link (pydantic v2,
frozen, strict, every number sourced). Systems built from them (Node, Cluster) are in
:mod:`simtrain.specs.hardware`, which re-exports these names.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, Field, model_validator

from simtrain.errors import SpecError
from simtrain.glossary import DeviceKind, DType, LinkKind, Mark
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

__all__ = ["Name", "Fraction", "MatrixUnit", "MemoryTier", "Device", "Link", "LinkRef", "DeviceRef", "resolve_ref"]

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
    clock_hz_by_dtype: dict[DType, Sourced[Hertz]] = Field(default_factory=dict)
    """Per-precision design clock where it differs from ``clock_hz`` (an FPGA closes timing lower for a
    soft-logic fp32 FMA than for packed int8 MACs in the hard DSP); absent dtypes use ``clock_hz``."""
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

    def clock_for(self, dtype: DType) -> float:
        """The clock the ``dtype`` path runs at (Hz)."""
        clock = self.clock_hz_by_dtype.get(DType(dtype))
        return (clock or self.clock_hz).value

    def derived_peak_flops_per_s(self, dtype: DType) -> float | None:
        """``units × fma_per_clock_per_unit[dtype] × 2 × clock_for(dtype)`` (one FMA = 2 FLOPs); for an
        FPGA the units are DSP slices and the FMA rate per slice is the design's mapping (e.g. 2 packed
        int8 MACs per DSP48E2, or 1 / 2.5 of an fp32 FMA built from 2.5 slices and LUTs)."""
        fma = self.fma_per_clock_per_unit.get(DType(dtype))
        if fma is None:
            return None
        return self.units_count.value * fma * 2.0 * self.clock_for(dtype)


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


def resolve_ref(kind: str):
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


LinkRef = Annotated[Link, resolve_ref("link")]


class Device(Spec):
    """One accelerator (or CPU socket): dense peaks per dtype, memory tiers, matrix unit, power, price."""

    library_kind: ClassVar[str | None] = "device"

    name: Name
    kind: DeviceKind
    vendor: str | None = None
    description: str = ""
    peak_flops_per_s: dict[DType, Sourced[FlopsPerS]] = Field(default_factory=dict)
    """Dense peak per dtype (never the 2:4-sparse figure). For int8 the value is ops/s. An FPGA may leave
    out a dtype its matrix unit derives (a design's peak is DSP count × ops per DSP × clock, not a
    datasheet figure): :attr:`peaks_flops_per_s` adds it, marked D."""
    vector_flops_per_s: Sourced[FlopsPerS] | None = None
    """Non-matrix (SIMD / CUDA-core) fp32 rate used by elementwise ops; defaults to the fp32 peak."""
    memory: Annotated[list[MemoryTier], Field(min_length=1, max_length=8)]
    main_memory: Name | None = None
    """Tier that holds weights and activations; the last tier when omitted."""
    matrix_unit: MatrixUnit | None = None
    tdp_w: Sourced[Watts] | None = None
    idle_power_w: Sourced[Watts] | None = None
    power_limit_w: Sourced[Annotated[Watts, Field(le=100_000)]] | None = None
    """Board power limit the device runs under (``nvidia-smi -pl``, a PCIe part's lower rating), at most
    ``tdp_w``, which it needs: the clock drops with it and every compute peak with the clock
    (cost/ceilings.py ``power_clock_fraction``, the cube law of CMOS dynamic power); memory bandwidth
    does not (the HBM clock is separate). None: the device runs at ``tdp_w``."""
    price_per_hour: Sourced[DollarsPerHour] | None = None
    efficiency: Efficiency | None = None
    host_link: LinkRef | None = None
    """Host-to-device link (PCIe, or a wafer system's I/O): a library name, resolved on load. Feeds the
    input pipeline's host-to-device copy when the node's host does not give its own ``pcie_link``."""
    memory_external: MemoryTier | None = None
    """An off-device store the device streams from, not part of its own hierarchy (Cerebras MemoryX:
    weights live there and are streamed in layer by layer; ``bandwidth_bytes_per_s`` is the streaming
    rate into one device, i.e. the system I/O, not the store's internal rate). None for everything else."""
    execution: Literal["time_multiplexed", "layer_pipelined"] | None = None
    """FPGA execution style (None: time-multiplexed). ``time_multiplexed``: one engine runs the layers one
    after another, weights streamed from HBM/DDR. ``layer_pipelined``: a dataflow design, every layer its
    own pipeline stage with its weights resident in BRAM/URAM; see :mod:`simtrain.cost.fpga`."""
    notes: str | None = None

    @model_validator(mode="after")
    def _check(self) -> Device:
        if not self.peaks_flops_per_s:
            raise ValueError("peak_flops_per_s needs at least one dtype (an FPGA may derive it from matrix_unit)")
        if self.execution is not None and self.kind.value != "fpga":
            raise ValueError(f"execution {self.execution!r} is an FPGA design choice; kind is {self.kind.value!r}")
        if self.execution == "layer_pipelined" and not any(t.level == "sram" for t in self.memory):
            raise ValueError("layer_pipelined execution keeps the weights on chip: give an 'sram' memory tier")
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
        self._check_power_limit()
        if self.memory_external is not None and self.memory_external.name in names:
            raise ValueError(f"memory_external.name {self.memory_external.name!r} repeats a memory tier name")
        return self

    def _check_power_limit(self) -> None:
        """``power_limit_w`` needs ``tdp_w`` (the power the datasheet clock runs at), is at most it, and
        is above ``idle_power_w`` (a limit at idle leaves no power to compute with)."""
        limit = self.power_limit_w
        if limit is None:
            return
        if self.tdp_w is None:
            raise ValueError("power_limit_w needs tdp_w (the power the datasheet clock is rated at)")
        if limit.value > self.tdp_w.value:
            raise ValueError(f"power_limit_w ({limit.value:g} W) exceeds tdp_w ({self.tdp_w.value:g} W)")
        if self.idle_power_w is not None and limit.value <= self.idle_power_w.value:
            raise ValueError(f"power_limit_w ({limit.value:g} W) must exceed idle_power_w "
                             f"({self.idle_power_w.value:g} W)")

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

    @property
    def peaks_flops_per_s(self) -> dict[DType, Sourced[float]]:
        """``peak_flops_per_s`` plus, on an FPGA, each dtype its matrix unit derives and the spec does not
        list (``MatrixUnit.derived_peak_flops_per_s``, marked D): the peaks every cost rule reads."""
        unit = self.matrix_unit
        if self.kind.value != "fpga" or unit is None:
            return dict(self.peak_flops_per_s)
        out = dict(self.peak_flops_per_s)
        for dtype in unit.fma_per_clock_per_unit:
            if dtype not in out:
                out[dtype] = Sourced[float](value=unit.derived_peak_flops_per_s(dtype), mark=Mark.D,
                                            source=f"derived: {unit.units_count.value:g} {unit.kind} x "
                                                   f"{unit.fma_per_clock_per_unit[dtype]:g} FMA/clk x 2 x "
                                                   f"{unit.clock_for(dtype) / 1e9:g} GHz")
        return out

    def peak(self, dtype: DType | str) -> float | None:
        """Dense peak FLOP/s for ``dtype``; ``None`` when the device has no such path."""
        s = self.peak_flops_per_s.get(DType(dtype))
        if s is None and self.kind.value == "fpga":
            s = self.peaks_flops_per_s.get(DType(dtype))
        return None if s is None else s.value

    @property
    def vector_peak_flops_per_s(self) -> float:
        if self.vector_flops_per_s is not None:
            return self.vector_flops_per_s.value
        peaks = self.peaks_flops_per_s
        for dt in (DType.FP32, DType.BF16, DType.FP16, DType.INT8):
            if dt in peaks:
                return peaks[dt].value
        return next(iter(peaks.values())).value


# ----------------------------------------------------------------------------------------------
# Links, hosts, nodes, clusters
# ----------------------------------------------------------------------------------------------
DeviceRef = Annotated[Device, resolve_ref("device")]
