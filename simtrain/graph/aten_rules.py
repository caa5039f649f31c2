"""ATen rule registry: what one captured ATen operator computes, for :func:`from_torch`.

Each rule maps an :class:`~simtrain.graph.torch_events.AtenEvent` (shapes only, no data) to an
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
:mod:`simtrain.graph.torch_rules_vector`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from math import prod
from typing import Literal

from simtrain.glossary import OpClass
from simtrain.graph.op import AttentionInfo, Gemm
from simtrain.graph.torch_events import AtenEvent, TensorMeta

__all__ = ["Part", "AtenCost", "GemmAxis", "register", "rule_for", "evaluate", "registered",
           "conv_macs", "sdpa_forward_flops", "sdpa_backward_flops", "IO", "CLASS_RANK"]

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
    _load_vector_rules()
    r = _RULES.get(name)
    if r is None and name.endswith("_") and not name.endswith("__"):
        r = _RULES.get(name[:-1])
    return r


def evaluate(ev: AtenEvent) -> AtenCost | None:
    """The cost of ``ev``, or None when no rule covers it (the importer lists it as unmodelled)."""
    r = rule_for(ev.name)
    return None if r is None else r(ev)


def registered() -> tuple[str, ...]:
    _load_vector_rules()
    return tuple(sorted(_RULES))


def _load_vector_rules() -> None:
    # Imported lazily: the rule modules register themselves through register() on import.
    import simtrain.graph.torch_rules_memory  # noqa: F401
    import simtrain.graph.torch_rules_vector  # noqa: F401


# --- matrix multiply ----------------------------------------------------------------------------

def _mm_cost(a: TensorMeta, b: TensorMeta, kind: str = "matmul") -> AtenCost:
    """C[M, N] = A[M, K] · B[K, N]: 2·M·N·K FLOPs."""
    m, k = a.shape
    n = b.shape[1]
    axis: GemmAxis = "m" if a.batch else ("n" if b.batch else "none")
    return AtenCost(2.0 * m * n * k, kind, OpClass.MATMUL, gemm=Gemm(m, n, k), gemm_axis=axis,
                    counter=True)


@register("mm")
def _mm(ev: AtenEvent) -> AtenCost:
    return _mm_cost(ev.tensor("self"), ev.tensor("mat2"))


@register("addmm")
def _addmm(ev: AtenEvent) -> AtenCost:
    return _mm_cost(ev.tensor("mat1"), ev.tensor("mat2"))


def _bmm_cost(a: TensorMeta, b: TensorMeta) -> AtenCost:
    """C[b, M, N] = A[b, M, K] · B[b, K, N]: 2·b·M·N·K FLOPs."""
    nb, m, k = a.shape
    n = b.shape[2]
    return AtenCost(2.0 * nb * m * n * k, "bmm", OpClass.MATMUL, gemm=Gemm(m, n, k, nb),
                    gemm_axis="batch" if (a.batch or b.batch) else "none", counter=True)


@register("bmm")
def _bmm(ev: AtenEvent) -> AtenCost:
    return _bmm_cost(ev.tensor("self"), ev.tensor("mat2"))


@register("baddbmm")
def _baddbmm(ev: AtenEvent) -> AtenCost:
    return _bmm_cost(ev.tensor("batch1"), ev.tensor("batch2"))


@register("mv", "addmv")
def _mv(ev: AtenEvent) -> AtenCost:
    """y[M] = A[M, K] · x[K]: 2·M·K FLOPs (FlopCounterMode has no mv formula)."""
    a = ev.tensor("mat") or ev.tensor("self")
    m, k = a.shape
    return AtenCost(2.0 * m * k, "matmul", OpClass.MATMUL, gemm=Gemm(m, 1, k),
                    gemm_axis="m" if a.batch else "none")


@register("dot", "vdot")
def _dot(ev: AtenEvent) -> AtenCost:
    return AtenCost(2.0 * ev.tensor("self").numel, "matmul", OpClass.MATMUL)


# --- convolution --------------------------------------------------------------------------------

def conv_macs(x_shape: tuple[int, ...], w_shape: tuple[int, ...], out_shape: tuple[int, ...],
              transposed: bool) -> int:
    """Multiply-accumulates of a (grouped, possibly transposed) convolution.

    Each output position of a normal convolution takes ``Cin/groups · prod(kernel)`` MACs per
    output channel: MACs = B · prod(out spatial) · Cout · (Cin/groups) · prod(kernel), and
    ``w = [Cout, Cin/groups, *kernel]`` gives Cout·Cin/groups = w[0]·w[1]. A transposed convolution
    scatters every *input* position: MACs = B · prod(in spatial) · w[0]·w[1] · prod(kernel) with
    ``w = [Cin, Cout/groups, *kernel]``.
    """
    spatial = (x_shape if transposed else out_shape)[2:]
    return x_shape[0] * prod(spatial) * w_shape[0] * w_shape[1] * prod(w_shape[2:])


def _conv_gemm(x: tuple[int, ...], w: tuple[int, ...], out: tuple[int, ...], transposed: bool,
               groups: int) -> Gemm:
    """Implicit GEMM per sample: m = output pixels, n = Cout/groups, k = Cin/groups·prod(kernel),
    batch = groups (a transposed conv as col2im: m = input pixels, n = Cout/groups·prod(kernel),
    k = Cin/groups)."""
    if transposed:
        return Gemm(prod(x[2:]), w[1] * prod(w[2:]), w[0] // groups, groups)
    return Gemm(prod(out[2:]), w[0] // groups, w[1] * prod(w[2:]), groups)


@register("convolution", "_convolution")
def _convolution(ev: AtenEvent) -> AtenCost:
    x, w, out = ev.tensor("input"), ev.tensor("weight"), ev.outs[0]
    transposed, groups = bool(ev.arg("transposed", False)), int(ev.arg("groups", 1))
    macs = conv_macs(x.shape, w.shape, out.shape, transposed)
    nd = len(x.shape) - 2
    return AtenCost(2.0 * macs, f"conv{nd}d", OpClass.CONV, gemm=_conv_gemm(x.shape, w.shape, out.shape,
                    transposed, groups), gemm_axis="samples", counter=True)


@register("convolution_backward")
def _convolution_backward(ev: AtenEvent) -> AtenCost:
    """grad_input and grad_weight each repeat the forward's MACs (every forward MAC has one partner
    in each gradient); grad_bias is a reduction the matrix convention does not count.

    FlopCounterMode (torch 2.13 ``conv_backward_flop``) computes grad_weight as a convolution over
    the *transposed* shapes without the group count, which multiplies it by ``groups``: for a
    depthwise convolution it over-counts the weight gradient by a factor of the channel count.
    simtrain keeps the first-principles count (docs/flop-counter-disagreements.md).
    """
    go, x, w = ev.tensor("grad_output"), ev.tensor("input"), ev.tensor("weight")
    macs = conv_macs(x.shape, w.shape, go.shape, bool(ev.arg("transposed", False)))
    mask = tuple(ev.arg("output_mask", (True, True, True)))
    parts = []
    if mask[0]:
        parts.append(Part(0, 2.0 * macs, ("grad_output", "weight")))
    if mask[1]:
        parts.append(Part(1, 2.0 * macs, ("grad_output", "input")))
    if len(mask) > 2 and mask[2]:
        parts.append(Part(2, 0.0, ("grad_output",)))
    nd = len(x.shape) - 2
    return AtenCost(sum(p.flops for p in parts), f"conv{nd}d", OpClass.CONV, parts=tuple(parts),
                    counter=True)


# --- scaled-dot-product attention ---------------------------------------------------------------

def sdpa_forward_flops(q: tuple[int, ...], k: tuple[int, ...], v: tuple[int, ...]) -> float:
    """S = Q·Kᵀ then O = P·V over [B, Hq, Sq, D] queries and [B, Hkv, Sk, D|Dv] keys / values
    (grouped-query attention broadcasts the KV heads): 2·B·Hq·Sq·Sk·(D + Dv). Dense, causal or not."""
    b, hq, sq, d = q if len(q) == 4 else (q[0], 1, q[1], q[2])
    sk, dv = k[-2], v[-1]
    return 2.0 * b * hq * sq * sk * (d + dv)


def sdpa_backward_flops(q: tuple[int, ...], k: tuple[int, ...], v: tuple[int, ...]) -> float:
    """A fused backward recomputes S = Q·Kᵀ, then dP = dO·Vᵀ, dV = Pᵀ·dO, dQ = dS·K, dK = dSᵀ·Q:
    2·B·Hq·Sq·Sk·(3·D + 2·Dv) (FlashAttention-2, Dao 2023, Algorithm 2)."""
    b, hq, sq, d = q if len(q) == 4 else (q[0], 1, q[1], q[2])
    sk, dv = k[-2], v[-1]
    return 2.0 * b * hq * sq * sk * (3 * d + 2 * dv)


def _attention_info(ev: AtenEvent) -> AttentionInfo:
    q, k = ev.tensor("query"), ev.tensor("key")
    heads, kv = (q.shape[1], k.shape[1]) if len(q.shape) == 4 else (1, 1)
    return AttentionInfo(heads=heads, kv_heads=kv, head_dim=q.shape[-1], seq_q=q.shape[-2],
                         seq_kv=k.shape[-2], causal=bool(ev.arg("is_causal", False)), fused=True)


def _qkv(ev: AtenEvent) -> tuple[tuple[int, ...], ...]:
    return ev.tensor("query").shape, ev.tensor("key").shape, ev.tensor("value").shape


_SDPA_FW_COUNTED = ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                    "_scaled_dot_product_cudnn_attention")
_SDPA_FW_UNCOUNTED = ("_scaled_dot_product_flash_attention_for_cpu",
                      "_scaled_dot_product_fused_attention_overrideable")


@register(*_SDPA_FW_COUNTED, *_SDPA_FW_UNCOUNTED)
def _sdpa_forward(ev: AtenEvent) -> AtenCost:
    """Fused attention forward; ``logsumexp`` (output 1) is an fp32 statistic kept per sample.

    FlopCounterMode has no formula for the CPU kernel ``_scaled_dot_product_flash_attention_for_cpu``
    and counts it as 0 FLOPs; simtrain counts it like the CUDA kernels."""
    info = _attention_info(ev)
    gemm = Gemm(info.seq_q, info.seq_kv, info.head_dim, info.heads)
    return AtenCost(sdpa_forward_flops(*_qkv(ev)), "attention", OpClass.ATTENTION, stats=(1,),
                    gemm=gemm, gemm_axis="samples", attention=info,
                    counter=ev.name in _SDPA_FW_COUNTED)


_SDPA_BW_COUNTED = tuple(n + "_backward" for n in _SDPA_FW_COUNTED)
_SDPA_BW_UNCOUNTED = tuple(n + "_backward" for n in _SDPA_FW_UNCOUNTED)


@register(*_SDPA_BW_COUNTED, *_SDPA_BW_UNCOUNTED)
def _sdpa_backward(ev: AtenEvent) -> AtenCost:
    return AtenCost(sdpa_backward_flops(*_qkv(ev)), "attention", OpClass.ATTENTION,
                    counter=ev.name in _SDPA_BW_COUNTED)
