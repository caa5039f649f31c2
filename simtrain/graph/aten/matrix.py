"""ATen rules for matrix work: mm / addmm / bmm / baddbmm / mv / dot, convolution (forward and
backward) and scaled-dot-product attention (forward and backward). FLOPs count FMA = 2."""

from __future__ import annotations

from math import prod

from simtrain.glossary import OpClass
from simtrain.graph.aten.registry import AtenCost, GemmAxis, Part, register
from simtrain.graph.capture.events import AtenEvent, TensorMeta
from simtrain.graph.op import AttentionInfo, Gemm

__all__ = ["conv_macs", "sdpa_forward_flops", "sdpa_backward_flops"]


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
