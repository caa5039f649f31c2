"""ATen rule registry: what one captured ATen operator computes, for :func:`from_torch`.

Each rule maps an :class:`~simtrain.graph.capture.events.AtenEvent` (shapes only, no data) to an
:class:`AtenCost`: FLOPs of the whole captured call (all samples; one FMA = 2 FLOPs), the op class,
how its bytes are counted, and — for operators that compute several gradients at once
(``convolution_backward``, ``native_layer_norm_backward``, ...) — one :class:`Part` per output so the
importer can put the input-gradient share in agrad and the weight-gradient share in wgrad.

Conventions (the importer's docstring gives the byte accounting):

* Matrix operators count multiply-accumulates × 2 and nothing else: the bias add of ``addmm`` /
  ``convolution`` and the grad-bias reduction inside ``convolution_backward`` are not counted — the
  convention of ``torch.utils.flop_counter.FlopCounterMode`` and of the 6N model-FLOPs rule (Kaplan
  et al. 2020 §2.1). A separate ``sum`` computing a linear's grad-bias *is* counted (reductions rule).
* Convolutions count every kernel position, padded ones included (the implicit-GEMM work).
* Attention counts the dense score matrix even when causal (FlopCounterMode's convention);
  :class:`~simtrain.graph.op.AttentionInfo` records ``causal`` so the cost layer can apply the
  executed fraction of a fused causal kernel.
* An operator with no rule is *unmodelled*: the importer lists it, never prices it as free.

Matrix, convolution and attention rules live here; vector, norm, memory and view rules in
:mod:`simtrain.graph.aten.vector`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from simtrain.glossary import OpClass
from simtrain.graph.capture.events import AtenEvent
from simtrain.graph.op import AttentionInfo, Gemm

__all__ = ["Part", "AtenCost", "GemmAxis", "register", "rule_for", "evaluate", "registered",
           "IO", "CLASS_RANK"]

IO = Literal["rw", "view", "write", "none", "gather"]
"""How the importer counts an op's bytes: ``rw`` reads every tensor input and writes every output;
``view`` moves nothing (aliases); ``write`` only writes its outputs (fills, random, creation);
``none`` moves nothing (allocation only); ``gather`` reads as many source elements as it writes
(embedding, index_select: only the looked-up rows are read)."""

GemmAxis = Literal["m", "n", "batch", "samples", "none"]
"""Which GEMM extent carries the batch: ``m`` / ``n`` (rows of a flattened batch), ``batch``
(bmm batch = samples × heads), ``samples`` (the Gemm is per sample already: conv, attention),
``none`` (weights only: does not scale with the batch)."""


@dataclass(frozen=True, slots=True)
class Part:
    """One output of a multi-gradient backward op: its FLOPs and the arguments it reads."""

    out: int
    flops: float
    reads: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class AtenCost:
    """What one ATen call costs, for the whole captured batch."""

    flops: float
    kind: str
    op_class: OpClass
    io: IO = "rw"
    parts: tuple[Part, ...] = ()
    stats: tuple[int, ...] = ()
    """Outputs that are fp32 statistics kept per sample (layer-norm mean/rstd, logsumexp)."""
    mb_stats: tuple[int, ...] = ()
    """Outputs whose size does not scale with the batch (batch-norm stats, a loss's total weight)."""
    gemm: Gemm | None = None
    gemm_axis: GemmAxis = "none"
    attention: AttentionInfo | None = None
    counter: bool = False
    draws: bool = False
    """The outputs are random draws (``bernoulli_``, ``rand``...): one per output element."""
    """True where stock FlopCounterMode has a formula for this op (the test compares those)."""
    act_read: float | None = None
    """Activation elements read, overriding "every tensor input": set by gathers that read only
    the rows they look up (embedding, index_select, nll_loss); parameters then count as not read
    in full — the gathered rows are already in this number."""


Rule = Callable[[AtenEvent], AtenCost]
_RULES: dict[str, Rule] = {}

#: Priority when several ATen ops of one torch call compete to name it (higher wins).
CLASS_RANK: dict[OpClass, int] = {
    OpClass.ATTENTION: 7, OpClass.CONV: 6, OpClass.MATMUL: 5, OpClass.EMBEDDING: 4, OpClass.NORM: 3,
    OpClass.REDUCTION: 2, OpClass.ELEMENTWISE: 1, OpClass.MEMORY: 0,
}


def register(*names: str) -> Callable[[Rule], Rule]:
    """Register ``rule`` for ATen overload packets ``names`` (no namespace, e.g. ``"mm"``)."""
    def deco(rule: Rule) -> Rule:
        for n in names:
            if n in _RULES:
                raise ValueError(f"duplicate ATen rule for {n!r}")
            _RULES[n] = rule
        return rule
    return deco


def rule_for(name: str) -> Rule | None:
    """The rule of packet ``name``; an in-place variant (``add_``) uses its functional rule."""
    r = _RULES.get(name)
    if r is None and name.endswith("_") and not name.endswith("__"):
        r = _RULES.get(name[:-1])
    return r


def evaluate(ev: AtenEvent) -> AtenCost | None:
    """The cost of ``ev``, or None when no rule covers it (the importer lists it as unmodelled)."""
    r = rule_for(ev.name)
    return None if r is None else r(ev)


def registered() -> tuple[str, ...]:
    return tuple(sorted(_RULES))
