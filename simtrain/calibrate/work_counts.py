"""First-principles work counts of the benchmarked ops: FLOPs (one FMA = 2) and bytes moved.

Conventions (the same ones the model graph uses, so fitted efficiencies transfer):

* bytes = reads + writes of every tensor the op touches, each crossing main memory **once**, at the
  element size ``e`` of the dtype (a roofline lower bound; caches and multi-pass kernels show up as
  fitted efficiency, not as extra bytes);
* GEMM C[m,n] = A[m,k]·B[k,n]: ``2mnk`` FLOPs forward; backward computes dA = dC·Bᵀ and dB = Aᵀ·dC,
  ``2 × 2mnk`` (Megatron-LM, Narayanan et al. 2021, §5.1: backward = 2 × forward);
* conv2d: ``2 · N · K · P · Q · (C/G) · R · S`` forward (each output element is a C/G·R·S dot product),
  backward = input-gradient + weight-gradient = 2 × forward;
* attention (Vaswani et al. 2017, eq. 1): QKᵀ and P·V are ``2·Sq·Skv·D`` each per head; causal masking
  keeps ``(S+1)/(2S)`` of the score matrix for Sq = Skv (FlashAttention-2, Dao 2023, §3.1 skips masked
  blocks); backward = 2 × forward (dV, dP, dQ, dK: four matmuls against two), no recompute counted;
  the fused kernel never writes the Sq×Skv scores, so bytes are Q, K, V, O (and their gradients);
* non-matrix ops count one FLOP per arithmetic or transcendental operation per element; the
  per-element tallies are spelled out at each constant.
"""

from __future__ import annotations

__all__ = ["Counts", "gemm_counts", "conv2d_counts", "conv2d_out_hw", "attention_counts", "counted_causal_fraction", "ELEMENTWISE_FLOPS_PER_ELEMENT", "ELEMENTWISE_TENSORS", "elementwise_counts", "norm_counts", "softmax_counts", "maxpool2d_counts", "embedding_counts", "copy_counts", "optimizer_counts"]

Counts = tuple[float, float]
"""(flops, bytes_moved)"""


def gemm_counts(m: int, n: int, k: int, e: int, batch: int = 1, backward: bool = False) -> Counts:
    """Forward: read A (mk), B (kn), write C (mn). Backward: dA reads dC, B and writes dA; dB reads A,
    dC and writes dB: 2·(mn + kn + mk) elements."""
    fw_flops = 2.0 * m * n * k * batch
    if not backward:
        return fw_flops, float(e * batch * (m * k + k * n + m * n))
    return 2.0 * fw_flops, float(e * batch * 2 * (m * n + k * n + m * k))


def conv2d_out_hw(h: int, w: int, r: int, s: int, stride: int, pad: int) -> tuple[int, int]:
    """Output height/width of a dilation-1 convolution: floor((H + 2·pad − R) / stride) + 1."""
    return (h + 2 * pad - r) // stride + 1, (w + 2 * pad - s) // stride + 1


def conv2d_counts(n: int, c: int, h: int, w: int, k: int, r: int, s: int, stride: int, pad: int,
                  groups: int, e: int, backward: bool = False) -> Counts:
    """Input I = N·C·H·W, weight W = K·(C/G)·R·S, output O = N·K·P·Q elements. Backward reads dO twice
    (dI and dW), I and W once, writes dI and dW: 2·(I + O + W)."""
    p, q = conv2d_out_hw(h, w, r, s, stride, pad)
    fw_flops = 2.0 * n * k * p * q * (c // groups) * r * s
    i_el, w_el, o_el = n * c * h * w, k * (c // groups) * r * s, n * k * p * q
    if not backward:
        return fw_flops, float(e * (i_el + w_el + o_el))
    return 2.0 * fw_flops, float(e * 2 * (i_el + o_el + w_el))


def counted_causal_fraction(sq: int, skv: int, causal: bool) -> float:
    """Share of the square an attention row's FLOPs count: the kept triangle (s + 1) / (2s) of a
    square causal call (the flash-attention benchmark convention), else the whole matrix."""
    return (sq + 1) / (2.0 * sq) if (causal and sq == skv) else 1.0


def attention_counts(b: int, heads: int, sq: int, skv: int, d: int, causal: bool, e: int,
                     backward: bool = False) -> Counts:
    """Fused attention: forward reads Q, K, V and writes O; backward reads Q, K, V, O, dO and writes
    dQ, dK, dV: (4·Sq + 4·Skv)·D per head."""
    kept = counted_causal_fraction(sq, skv, causal)
    fw_flops = 4.0 * b * heads * sq * skv * d * kept
    if not backward:
        return fw_flops, float(e * b * heads * d * (2 * sq + 2 * skv))
    return 2.0 * fw_flops, float(e * b * heads * d * (4 * sq + 4 * skv))


ELEMENTWISE_FLOPS_PER_ELEMENT = {
    "add": 1,    # a + b
    "mul": 1,    # a * b
    "relu": 1,   # max(x, 0)
    "gelu": 5,   # 0.5·x·(1 + erf(x/√2)): scale, erf, add, mul, mul
    "silu": 4,   # x·σ(x) = x / (1 + exp(−x)): neg, exp, add, div (the final product folds into the div)
}
#: tensors touched per element: binary ops read two and write one, unary ops read one and write one.
ELEMENTWISE_TENSORS = {"add": 3, "mul": 3, "relu": 2, "gelu": 2, "silu": 2}


def elementwise_counts(op: str, numel: int, e: int) -> Counts:
    return float(ELEMENTWISE_FLOPS_PER_ELEMENT[op] * numel), float(ELEMENTWISE_TENSORS[op] * numel * e)


#: per element: layernorm / batchnorm = mean (1) + variance (sub, square, add: 3) + normalise (sub, mul: 2)
#: + affine (mul, add: 2) = 8; rmsnorm = square-add (2) + scale (1) + weight (1) = 4.
_NORM_FLOPS = {"layernorm": 8, "batchnorm": 8, "rmsnorm": 4}
#: affine parameters per channel: layernorm / batchnorm read weight and bias, rmsnorm only a weight.
_NORM_PARAMS = {"layernorm": 2, "batchnorm": 2, "rmsnorm": 1}


_NORM_BW_FLOPS = {"layernorm": 13, "batchnorm": 13, "rmsnorm": 9}
"""Backward FLOPs per element, activation plus weight gradient (graph/rules/norm.py: 10 + 3, 7 + 2)."""


def norm_counts(kind: str, numel: int, channels: int, e: int, backward: bool = False) -> Counts:
    """Read x, write y (2 per element) plus the affine parameters once (statistics are O(channels)).
    Backward, as the graph rule counts its two parts: dX reads x and dY and writes dX, the weight
    gradient reads x and dY again (5 per element) and reads and writes the affine parameters."""
    params = _NORM_PARAMS[kind] * channels
    if backward:
        return float(_NORM_BW_FLOPS[kind] * numel), float(e * (5 * numel + 2 * params))
    return float(_NORM_FLOPS[kind] * numel), float(e * (2 * numel + params))


def softmax_counts(numel: int, e: int) -> Counts:
    """max (1), subtract (1), exp (1), sum (1), divide (1) per element; read x, write y."""
    return 5.0 * numel, float(2 * numel * e)


def maxpool2d_counts(n: int, c: int, h: int, w: int, k: int, stride: int, pad: int, e: int,
                     backward: bool = False, index_bytes: int = 8) -> Counts:
    """ATen ``max_pool2d_with_indices``: one compare per window element (out·k² FLOPs, the rule in
    graph/aten/memory.py); reads x, writes y and the int64 arg-max indices. Backward
    (``…_backward``): zero-fills dX, reads dY and the indices, adds each dY into dX at its arg-max
    (one FLOP per dY element)."""
    p, q = conv2d_out_hw(h, w, k, k, stride, pad)
    x, y = n * c * h * w, n * c * p * q
    if backward:
        return float(y), float(x * e + y * (e + index_bytes) + y * e)
    return float(y * k * k), float(x * e + y * (e + index_bytes))


def embedding_counts(tokens: int, dim: int, e: int, index_bytes: int = 8) -> Counts:
    """A gather: read the int64 indices, read one table row per token, write the output rows."""
    return 0.0, float(tokens * index_bytes + 2 * tokens * dim * e)


def copy_counts(numel: int, e: int) -> Counts:
    """dst.copy_(src): read once, write once."""
    return 0.0, float(2 * numel * e)


def optimizer_counts(kind: str, params: int, tensors: int, impl: str, device_kind: str = "cpu") -> tuple[float, float, int]:
    """(flops, bytes, kernels) of one step under ``impl`` (for-loop / foreach / fused) on a device of
    ``device_kind``, from the estimator's own rules (:mod:`simtrain.cost.optimizer`: FLOPs per
    parameter, :func:`impl_passes`, :func:`impl_kernels`), so the fitted launch overhead and bandwidth
    mean the same thing to the estimator."""
    from simtrain.cost.optimizer import impl_kernels, impl_passes, traits
    t = traits(kind)
    kernels = impl_kernels(kind, impl, tensors, params, device_kind)
    return float(t.flops_per_param * params), float(impl_passes(kind, impl, False) * 4 * params), kernels
