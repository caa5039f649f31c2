"""Op records: the exact account of what one operator computes, stores and moves, per sample.

All counts are **per sample** (one sequence of ``seq_len`` tokens, one image, one row) and in
**elements**, not bytes, so the precision regime is applied once, by the cost layer:
``bytes = elements × bytes-per-element(regime)``. Weight traffic does not scale with the batch and is
kept apart (``weight_read`` / ``weight_write`` are per micro-batch, not per sample).

FLOPs count one FMA as 2 FLOPs (the convention of datasheet peaks and FlopCounterMode).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from simtrain.glossary import DType, OpClass, Phase

__all__ = ["PhaseCounts", "Gemm", "AttentionInfo", "MoEInfo", "Saved", "Op", "TpSplit", "ZERO", "UnmodelledOp",
           "ModelParts"]

TpSplit = Literal["column", "row", "heads", "vocab", "expert", "replicate", "sequence"]
"""How tensor parallelism splits an op: column/row (Megatron linear splits), heads (attention core),
vocab (embedding / LM head), expert (MoE experts under EP), replicate (every TP rank does all of it),
sequence (replicated under plain TP, split by seq under sequence parallelism: norms, dropout, adds)."""


@dataclass(frozen=True, slots=True)
class PhaseCounts:
    """A number per backward-relevant phase: forward, activation-gradient, weight-gradient."""

    fw: float = 0.0
    agrad: float = 0.0
    wgrad: float = 0.0

    @property
    def total(self) -> float:
        return self.fw + self.agrad + self.wgrad

    @property
    def backward(self) -> float:
        return self.agrad + self.wgrad

    def get(self, phase: Phase | str) -> float:
        p = Phase(phase)
        if p is Phase.RECOMPUTE:
            return self.fw
        if p is Phase.OPTIM:
            return 0.0
        return getattr(self, p.value)

    def __add__(self, other: PhaseCounts) -> PhaseCounts:
        return PhaseCounts(self.fw + other.fw, self.agrad + other.agrad, self.wgrad + other.wgrad)

    def __mul__(self, k: float) -> PhaseCounts:
        return PhaseCounts(self.fw * k, self.agrad * k, self.wgrad * k)

    __rmul__ = __mul__


ZERO = PhaseCounts()


@dataclass(frozen=True, slots=True)
class Gemm:
    """Matrix-multiply geometry, for alignment / tile effects: C[m, n] += A[m, k] · B[k, n].

    ``m`` is per sample (rows of one sample: seq_len tokens, output pixels, or 1); the cost layer
    multiplies by the micro-batch. ``batch`` counts independent GEMMs (heads, groups, experts).
    """

    m: int
    n: int
    k: int
    batch: int = 1


@dataclass(frozen=True, slots=True)
class AttentionInfo:
    heads: int
    kv_heads: int
    head_dim: int
    seq_q: int
    seq_kv: int
    causal: bool
    fused: bool
    """Fused ("flash") attention never materialises the seq × seq scores."""
    v_head_dim: int | None = None
    """Value (and output) head dims where they differ from ``head_dim`` (MLA); None = head_dim."""

    @property
    def v_dim(self) -> int:
        return self.head_dim if self.v_head_dim is None else self.v_head_dim


@dataclass(frozen=True, slots=True)
class MoEInfo:
    experts: int
    top_k: int
    capacity_factor: float = 1.0


@dataclass(frozen=True, slots=True)
class Saved:
    """What the op keeps for its backward pass, per sample.

    ``act`` elements are stored in the activation dtype of the regime (2 B under bf16, 4 B under
    fp32); ``mask`` elements are 1 byte each (dropout masks, bool); ``fixed_bytes`` do not depend on
    the regime (int64 indices, fp32 norm statistics).
    """

    act: float = 0.0
    mask: float = 0.0
    fixed_bytes: float = 0.0

    def bytes(self, act_bytes: float) -> float:
        return self.act * act_bytes + self.mask + self.fixed_bytes

    def __add__(self, other: Saved) -> Saved:
        return Saved(self.act + other.act, self.mask + other.mask, self.fixed_bytes + other.fixed_bytes)

    def __mul__(self, k: float) -> Saved:
        return Saved(self.act * k, self.mask * k, self.fixed_bytes * k)


@dataclass(frozen=True, slots=True)
class Op:
    """One operator of a model graph. Built by a rule in :mod:`simtrain.graph.rules`."""

    name: str
    """Hierarchical name, e.g. ``layers.3/attn/qkv``."""
    kind: str
    """Rule key: linear, matmul, bmm, conv2d, attention, layernorm, ..."""
    op_class: OpClass
    block: str
    """Pipeline partition unit the op belongs to (``embed``, ``layers.3``, ``head``)."""
    flops: PhaseCounts
    act_read: PhaseCounts
    """Activation elements read per sample, per phase."""
    act_write: PhaseCounts
    weight_read: PhaseCounts = ZERO
    """Parameter elements read per micro-batch (fw: W; agrad: W; wgrad: the gradient accumulator)."""
    weight_write: PhaseCounts = ZERO
    """Parameter-gradient elements written per micro-batch (wgrad)."""
    param_count: int = 0
    saved: Saved = field(default_factory=Saved)
    shapes: tuple[tuple[int, ...], ...] = ()
    """Input shapes per sample (batch dim dropped), for the summary."""
    out_shape: tuple[int, ...] = ()
    dtype: DType = DType.FP32
    """Dtype the op was described in; the precision regime decides what it runs in."""
    gemm: Gemm | None = None
    tp_split: TpSplit = "replicate"
    attention: AttentionInfo | None = None
    moe: MoEInfo | None = None
    runs_in_low_precision: bool = True
    """False for ops a mixed-precision regime keeps in fp32 (softmax in the loss, norms' statistics)."""
    attrs: tuple[tuple[str, object], ...] = ()
    fixed_read_bytes: PhaseCounts = ZERO
    """Bytes read per sample that do not follow the activation dtype (1-byte dropout masks, int64
    indices, fp32 norm statistics / log-softmax), per phase; *not* included in ``act_read``."""
    fixed_write_bytes: PhaseCounts = ZERO
    """Bytes written per sample that do not follow the activation dtype, per phase; *not* in ``act_write``."""

    def attr(self, key: str, default: object = None) -> object:
        for k, v in self.attrs:
            if k == key:
                return v
        return default

    @property
    def has_backward(self) -> bool:
        """Does the op run in the backward at all? False for work done outside autograd (a trainer's
        metrics re-evaluating the loss, ``cross_entropy_metric``): it holds no gradients and is never
        recomputed."""
        phases = (self.flops, self.act_read, self.act_write, self.fixed_read_bytes, self.fixed_write_bytes)
        return any(p.agrad or p.wgrad for p in phases) or bool(self.weight_write.wgrad)

    @property
    def out_elements(self) -> float:
        n = 1
        for d in self.out_shape:
            n *= d
        return float(n)


@dataclass(frozen=True, slots=True)
class UnmodelledOp:
    """An operator an importer saw but has no rule for: listed and counted, never dropped."""

    name: str
    count: int
    phase: str
    example_shapes: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True)
class ModelParts:
    """What a builder or an importer produces: the ops and edges of a model and what it was built from.
    ``Model.from_parts`` turns it into a :class:`~simtrain.graph.model.Model`; builders and importers
    never import the Model class (it sits above them: its constructors call them)."""

    name: str
    ops: tuple[Op, ...]
    edges: tuple[tuple[str, str], ...] | None = None
    arch: object = None
    seq_len: int | None = None
    unmodelled: tuple[UnmodelledOp, ...] = ()
    rebuild: Callable[[int], object] | None = field(default=None, compare=False)
    meta: dict | None = field(default=None, compare=False)
