"""StepReport: what both engines return. Frozen; numbers in SI units; formatting lives in report/text.py."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from simtrain.errors import SimtrainError
from simtrain.frozen import FrozenDict

__all__ = ["StepReport", "MemoryReport", "reserved_bytes_of", "overflow_text", "MEMORY_TERM_NAMES", "OpTime", "CommReport", "BREAKDOWN_KEYS", "ENERGY_MODEL", "device_watts", "full_load_watts",
           "DEFAULT_IDLE_FRACTION_OF_TDP", "J_PER_KWH"]

BREAKDOWN_KEYS = ("compute", "recompute", "comm_exposed", "pipeline_bubble", "data_stall", "optimizer",
                  "interference", "idle_gaps", "host_gaps", "stragglers")

ENERGY_MODEL = (
    "energy = devices × step_time × (idle_power + (tdp − idle_power) × busy_fraction); busy_fraction = "
    "(compute + recompute + optimizer) / step_time; host, network and cooling are excluded (multiply by "
    "the site's PUE for facility energy). Devices without idle_power_w use 30 % of TDP."
)


def overflow_text(rank: int, stage: int, reserved_bytes: float, capacity_bytes: float, overflow_bytes: float,
                  term: str, term_bytes: float) -> str:
    """``MemoryReport.overflow_reason``'s line (the vectorized sweep writes it from arrays)."""
    return (f"out of memory on rank {rank} (stage {stage}): reserves {reserved_bytes / 2**30:.2f} GiB "
            f"of {capacity_bytes / 2**30:.2f} GiB usable, over by {overflow_bytes / 2**30:.2f} GiB; "
            f"the largest term is {term} ({term_bytes / 2**30:.2f} GiB)")


#: the terms ``MemoryReport.largest_term`` compares, in its order (the first of equals wins)
MEMORY_TERM_NAMES = ("params", "grads", "optimizer", "activations", "buffers", "overhead", "reserve")


def reserved_bytes_of(persistent, transient, reserve_fraction, workspace_bytes):
    """The allocator model (scalars or numpy arrays alike: the vectorized path uses it too):
    persistent state as allocated, transient tensors with the caching allocator's reserve, plus the
    workspaces outside the allocator (:class:`MemoryReport`)."""
    return persistent + transient * (1.0 + reserve_fraction) + workspace_bytes


@dataclass(frozen=True, slots=True)
class MemoryReport:
    """Memory of the peak device (bytes): what the tensors allocate, and what the framework reserves.

    * ``total_bytes`` — the *allocated* peak: params + grads + optimizer + activations + buffers
      (+ ``overhead_bytes``, the generic allowance, see below); ``torch.cuda.max_memory_allocated``.
    * ``reserved_bytes`` — what the process takes from the device: the caching allocator keeps freed
      blocks and rounds requests up to its block sizes, so its reserved segments exceed the allocated
      peak (PyTorch docs, "CUDA semantics — Memory management": ``max_memory_reserved`` ≥
      ``max_memory_allocated``), and the CUDA context, NCCL communicators and cuBLAS / cuDNN
      workspaces live outside the allocator's tensors. The reserve grows on the *transient* tensors
      only: weights, gradients and optimizer state are allocated once, at their final size, and never
      freed (FSDP's flat parameters, Megatron's contiguous gradient buffer, the optimizer's states), so
      no freed block of theirs is cached or split; fragmentation comes from the activations and
      working buffers allocated and freed every micro-batch (PyTorch "Understanding CUDA Memory
      Usage": the snapshot's inactive split blocks)::

          reserved = (params + grads + optimizer)
                     + (activations + buffers + overhead) · (1 + reserve_fraction) + workspace_bytes

      (``Stack.allocator_reserve_fraction``, ``Stack.workspace_bytes``). ``fits`` means
      reserved ≤ capacity; ``overflow_bytes`` is reserved − capacity.
    * ``overhead_bytes`` — the generic allowance ``TrainConfig.memory_overhead_fraction`` × usable
      capacity, used when the software stack gives no allocator model (reserve fraction and workspace
      both 0: the reference stack, simtrain's behaviour before stacks). A stack with a reserve or a
      workspace replaces it (``overhead_bytes`` = 0) unless the TrainConfig sets
      ``memory_overhead_fraction`` explicitly, which then counts on top (parallel/memory_plan.py).
    """

    params_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    buffers_bytes: float
    overhead_bytes: float
    capacity_bytes: float
    rank: int = 0
    stage: int = 0
    host_prefetch_bytes: float = 0.0
    """DataLoader prefetch buffers in host DRAM (workers × prefetch_factor batches): not on the device."""
    external_bytes: float = 0.0
    """Weights, gradients and optimizer state held off-device by a weight-streaming system (MemoryX)."""
    external_capacity_bytes: float | None = None
    reserve_fraction: float = 0.0
    """Caching-allocator reserve over the allocated peak (``Stack.allocator_reserve_fraction``)."""
    workspace_bytes: float = 0.0
    """CUDA context, NCCL buffers, cuBLAS / cuDNN workspaces (``Stack.workspace_bytes``)."""

    @property
    def total_bytes(self) -> float:
        """The allocated peak: the tensors (plus the generic overhead allowance when it applies)."""
        return (self.params_bytes + self.grads_bytes + self.optimizer_bytes + self.activations_bytes
                + self.buffers_bytes + self.overhead_bytes)

    @property
    def persistent_bytes(self) -> float:
        """Tensors allocated once and kept for the whole run: weights, gradients, optimizer state."""
        return self.params_bytes + self.grads_bytes + self.optimizer_bytes

    @property
    def transient_bytes(self) -> float:
        """Tensors allocated and freed every step: activations, working buffers (and the allowance)."""
        return self.activations_bytes + self.buffers_bytes + self.overhead_bytes

    @property
    def reserved_bytes(self) -> float:
        """Device memory the framework holds: persistent + transient · (1 + reserve_fraction) + workspace."""
        return reserved_bytes_of(self.persistent_bytes, self.transient_bytes, self.reserve_fraction,
                                 self.workspace_bytes)

    @property
    def reserve_bytes(self) -> float:
        """reserved − allocated: the allocator's cached / rounded blocks plus the workspaces."""
        return self.reserved_bytes - self.total_bytes

    @property
    def fits(self) -> bool:
        """Reserved (not merely allocated) memory within the usable capacity."""
        external_ok = self.external_capacity_bytes is None or self.external_bytes <= self.external_capacity_bytes
        return self.reserved_bytes <= self.capacity_bytes and external_ok

    @property
    def overflow_bytes(self) -> float:
        return max(0.0, self.reserved_bytes - self.capacity_bytes)

    def overflow_reason(self) -> str:
        """Why the rank does not fit, in one line: what it reserves, by how much it is over, its largest term."""
        return overflow_text(self.rank, self.stage, self.reserved_bytes, self.capacity_bytes, self.overflow_bytes,
                             *self.largest_term())

    def largest_term(self) -> tuple[str, float]:
        terms = dict(zip(MEMORY_TERM_NAMES, (self.params_bytes, self.grads_bytes, self.optimizer_bytes,
                                             self.activations_bytes, self.buffers_bytes, self.overhead_bytes,
                                             self.reserve_bytes), strict=True))
        name = max(terms, key=terms.get)
        return name, terms[name]

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(total_bytes=self.total_bytes, reserved_bytes=self.reserved_bytes, fits=self.fits,
                 overflow_bytes=self.overflow_bytes)
        return d


@dataclass(frozen=True, slots=True)
class OpTime:
    name: str
    kind: str
    seconds: float
    """Seconds per step on the peak stage (all micro-batches, fw + bw + recompute)."""
    share: float


@dataclass(frozen=True, slots=True)
class CommReport:
    """Per parallel group: total communication time per step and the part nothing hides."""

    axis: str
    total_s: float
    exposed_s: float
    bytes_per_rank: float


def _frozen(d: Mapping[str, float]) -> Mapping[str, float]:
    return FrozenDict(d)


@dataclass(frozen=True)
class StepReport:
    """One training step of one job (DESIGN.md "Public API contract")."""

    model_name: str
    cluster_name: str
    devices_count: int
    feasible: bool
    reasons: tuple[str, ...]
    step_time_s: float
    global_batch_size: int
    tokens_per_sample: int
    model_flops_per_step: float
    hardware_flops_per_step: float
    peak_flops_per_s: float
    """Dense peak per device of the dtype the matmuls ran in (the MFU denominator)."""
    time_breakdown_s: Mapping[str, float]
    memory: MemoryReport | None
    bottleneck: str
    bottleneck_reason: str
    vector_flops_per_step: float = 0.0
    """fw + bw FLOPs of the non-matrix ops (norms, activations, softmax, adds, losses), whole job:
    left out of ``model_flops_per_step`` (matrix ops only: PaLM, Megatron-LM, FlopCounterMode) and of
    MFU, but their time is costed like any op's."""
    top_ops: tuple[OpTime, ...] = ()
    comm: tuple[CommReport, ...] = ()
    layout: Mapping[str, int] = field(default_factory=dict)
    device_name: str = ""
    price_per_device_hour: float | None = None
    tdp_w: float | None = None
    """Draw of one device at full load: its power limit where one is set, else its TDP."""
    idle_power_w: float | None = None
    eval_time_per_step_s: float = 0.0
    """Evaluation time amortised per training step (forward only, every N steps)."""
    attention_flops: str = "full"
    engine: str = "estimate"
    stack: str = ""
    """The software stack the step was costed for (TrainConfig.stack, resolved)."""
    notes: tuple[str, ...] = ()
    sync_wait_s: float = 0.0
    """Of ``time_breakdown_s["comm_exposed"]``, the expected wait for the slowest rank at the gradient
    sync (the device's measured per-step jitter, ``Efficiency.rank_jitter_sigma``; 0 on one rank)."""
    warnings: tuple[str, ...] = ()
    """Sanity flags (report/sanity.py): implausible MFU/HFU, communication- or data-bound, memory full."""
    compute_by_class_s: Mapping[str, float] = field(default_factory=dict)
    """Seconds per step of the critical stage's ops by op class (matmul, attention, norm, ...), forward,
    backward and recomputation: where ``compute`` + ``recompute`` of the breakdown go."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "time_breakdown_s", _frozen(self.time_breakdown_s))
        object.__setattr__(self, "compute_by_class_s", _frozen(self.compute_by_class_s))
        object.__setattr__(self, "layout", _frozen(self.layout))
        object.__setattr__(self, "warnings", tuple(self.warnings))

    # --- rates -----------------------------------------------------------------------------------
    @property
    def samples_per_s(self) -> float:
        return self.global_batch_size / self.step_time_s if self.step_time_s > 0 else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.samples_per_s * self.tokens_per_sample

    @property
    def flops_per_device_per_s(self) -> float:
        """Achieved model FLOP/s per device."""
        if self.step_time_s <= 0:
            return 0.0
        return self.model_flops_per_step / (self.step_time_s * self.devices_count)

    @property
    def mfu(self) -> float:
        """Model FLOPs utilisation (PaLM, Chowdhery et al. 2022, App. B): recomputation excluded."""
        return self.flops_per_device_per_s / self.peak_flops_per_s if self.peak_flops_per_s else 0.0

    @property
    def hfu(self) -> float:
        """Hardware FLOPs utilisation: recomputed forward passes included."""
        if self.step_time_s <= 0 or not self.peak_flops_per_s:
            return 0.0
        return self.hardware_flops_per_step / (self.step_time_s * self.devices_count * self.peak_flops_per_s)

    # --- time, money, energy ---------------------------------------------------------------------
    def steps_for(self, *, tokens: float | None = None, samples: float | None = None,
                  epochs: float | None = None, dataset_samples: float | None = None) -> float:
        """Optimizer steps to see ``tokens`` / ``samples`` / ``epochs`` × ``dataset_samples``."""
        amounts = {"tokens": tokens, "samples": samples, "epochs": epochs}
        given = [k for k, v in amounts.items() if v is not None]
        if len(given) != 1:
            raise SimtrainError("give exactly one of tokens=, samples=, epochs=")
        _check_amount(given[0], amounts[given[0]])
        if tokens is not None:
            samples = tokens / self.tokens_per_sample
        elif epochs is not None:
            if dataset_samples is None:
                raise SimtrainError("epochs= needs dataset_samples=")
            samples = epochs * _check_amount("dataset_samples", dataset_samples)
        return samples / self.global_batch_size

    def time_to_train(self, *args, tokens: float | None = None, samples: float | None = None,
                      epochs: float | None = None, dataset_samples: float | None = None) -> float:
        """Seconds to train on ``tokens`` / ``samples`` / ``epochs`` (evaluation amortised in)."""
        _keywords_only("time_to_train", args, "tokens=, samples= or epochs=")
        steps = self.steps_for(tokens=tokens, samples=samples, epochs=epochs, dataset_samples=dataset_samples)
        return steps * (self.step_time_s + self.eval_time_per_step_s)

    def _duration_s(self, name: str, args: tuple, duration_s: float | None, amounts: dict) -> float:
        """The training time a money/energy question is about: ``duration_s`` given directly, or the
        time to train the given tokens / samples / epochs."""
        _keywords_only(name, args, "duration_s= (seconds) or tokens=, samples=, epochs=")
        if duration_s is not None:
            if any(v is not None for v in amounts.values()):
                raise SimtrainError(f"{name}: give duration_s= or an amount of data, not both")
            return _check_amount("duration_s", duration_s)
        return self.time_to_train(**amounts)

    def cost_dollars(self, *args, duration_s: float | None = None, tokens: float | None = None,
                     samples: float | None = None, epochs: float | None = None,
                     dataset_samples: float | None = None) -> float | None:
        """US dollars for ``duration_s`` seconds of the whole cluster, or for the time to train the
        given data; None when the device spec has no price."""
        seconds = self._duration_s("cost_dollars", args, duration_s, dict(
            tokens=tokens, samples=samples, epochs=epochs, dataset_samples=dataset_samples))
        if self.price_per_device_hour is None:
            return None
        return self.devices_count * seconds / 3600.0 * self.price_per_device_hour

    def energy_kwh(self, *args, duration_s: float | None = None, tokens: float | None = None,
                   samples: float | None = None, epochs: float | None = None,
                   dataset_samples: float | None = None) -> float | None:
        """Device energy for ``duration_s`` seconds of training, or for the time to train the given
        data (see ENERGY_MODEL); None when the device spec has no TDP."""
        seconds = self._duration_s("energy_kwh", args, duration_s, dict(
            tokens=tokens, samples=samples, epochs=epochs, dataset_samples=dataset_samples))
        if self.tdp_w is None or self.step_time_s <= 0:
            return None
        b = self.time_breakdown_s
        busy = min(1.0, (b.get("compute", 0) + b.get("recompute", 0) + b.get("optimizer", 0)) / self.step_time_s)
        return self.devices_count * device_watts(self.tdp_w, self.idle_power_w, busy) * seconds / J_PER_KWH

    # --- export ----------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        d = {
            "model": self.model_name, "cluster": self.cluster_name, "device": self.device_name,
            "devices": self.devices_count, "feasible": self.feasible, "reasons": list(self.reasons),
            "engine": self.engine, "stack": self.stack, "step_time_s": self.step_time_s, "samples_per_s": self.samples_per_s,
            "tokens_per_s": self.tokens_per_s, "model_flops_per_step": self.model_flops_per_step,
            "hardware_flops_per_step": self.hardware_flops_per_step, "vector_flops_per_step": self.vector_flops_per_step,
            "mfu": self.mfu, "hfu": self.hfu,
            "flops_per_device_per_s": self.flops_per_device_per_s, "peak_flops_per_s": self.peak_flops_per_s,
            "time_breakdown_s": dict(self.time_breakdown_s), "bottleneck": self.bottleneck,
            "bottleneck_reason": self.bottleneck_reason, "layout": dict(self.layout),
            "memory": self.memory.to_dict() if self.memory else None,
            "top_ops": [asdict(o) for o in self.top_ops], "comm": [asdict(c) for c in self.comm],
            "attention_flops": self.attention_flops, "notes": list(self.notes), "sync_wait_s": self.sync_wait_s,
            "warnings": list(self.warnings), "compute_by_class_s": dict(self.compute_by_class_s),
        }
        return d


#: idle power as a share of TDP for devices whose spec gives no idle figure (ENERGY_MODEL)
DEFAULT_IDLE_FRACTION_OF_TDP = 0.3
J_PER_KWH = 3.6e6


def full_load_watts(device) -> float | None:
    """A device's draw at full load: its power limit where one is set (``Device.power_limit_w``: the
    board caps its draw there), else its TDP; None without either."""
    limit = getattr(device, "power_limit_w", None)
    if limit is not None:
        return limit.value
    return None if device.tdp_w is None else device.tdp_w.value


def device_watts(tdp_w, idle_power_w, busy_fraction):
    """One device's mean power (ENERGY_MODEL): idle + (TDP − idle) × busy fraction; works on arrays."""
    idle = idle_power_w if idle_power_w is not None else DEFAULT_IDLE_FRACTION_OF_TDP * tdp_w
    return idle + (tdp_w - idle) * busy_fraction


def _keywords_only(name: str, args: tuple, expected: str) -> None:
    """A bare number is ambiguous (seconds? tokens?) — ``cost_dollars(300e9)`` once read 300e9
    tokens as seconds — so these take keywords with the unit in the name."""
    if args:
        raise SimtrainError(f"{name}() takes keyword arguments only: {expected}; got {len(args)} positional")


def _check_amount(name: str, value) -> float:
    """A finite, non-negative amount (an int or float, not a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SimtrainError(f"{name}= must be a number, got {type(value).__name__}")
    if not math.isfinite(value) or value < 0:
        raise SimtrainError(f"{name}= must be finite and ≥ 0, got {value!r}")
    return float(value)
