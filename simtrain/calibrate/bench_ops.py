"""The matrix-class microbenchmarks and what every bench shares: the work counts of the
benchmarked ops, and the benchmark grids (timing one callable: :mod:`simtrain.calibrate.timing`).

Work counts
-----------

First-principles work counts of the benchmarked ops: FLOPs (one FMA = 2) and bytes moved.

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

Grids
-----

Benchmark grids: which shapes each microbenchmark runs at, per size of run and device.

``tiny`` is for tests (seconds), ``quick`` for ``simtrain calibrate --quick`` (about a minute on two
CPU cores), ``full`` for a calibration worth keeping (minutes). Shapes mix aligned (powers of two) and
unaligned (odd, prime-ish) dims and span small ops, where launch overhead and under-filled cores
dominate, to large ones near the ceiling, so both ends of each efficiency curve are constrained.
Convolutions also span what real networks run besides large square layers: small feature maps
(2×2, 4×4), stride-2 downsampling (3×3 and 1×1 projections, whose input gradient is a transposed
conv), grouped and depthwise layers.

Matrix-class benches
--------------------

Matrix-class microbenchmarks (GEMM, batched matmul, conv2d, scaled-dot-product attention), forward
and backward, through real PyTorch. Work counts come from the counts above.

Backward is timed as ``torch.autograd.grad(out, inputs, grad_out, retain_graph=True)`` on a graph
built once, so each sample runs exactly the backward kernels (no forward, no ``.grad`` accumulation).
Each such call also pays the autograd engine's fixed per-call cost (hand-off to the engine thread and
back, tens of µs on a CPU), which a training step pays once per backward, not once per op. It is
measured on its own (:func:`bench_autograd_call`: the backward of a one-element multiply) and
subtracted from every backward row (``params["autograd_call_s"]`` records how much), never below
a tenth of the raw time.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from simtrain.calibrate.records import Row
from simtrain.calibrate.timing import (  # noqa: F401  (re-exported: the benches' callers time with them)
    Timing,
    TimingPlan,
    median_ci,
    synchronize,
    time_call,
    time_pair,
    timing_of,
)
from simtrain.glossary import DTYPE_BYTES, DType, OpClass

__all__ = ["Timing", "TimingPlan", "time_call", "time_pair", "timing_of", "synchronize", "median_ci",
           "gemm_counts", "conv2d_counts", "conv2d_out_hw", "attention_counts", "counted_causal_fraction",
           "ELEMENTWISE_FLOPS_PER_ELEMENT", "ELEMENTWISE_TENSORS", "elementwise_counts", "norm_counts",
           "softmax_counts", "embedding_counts", "copy_counts", "optimizer_counts", "Grid", "grid_for",
           "GRID_NAMES", "Bench", "bench_autograd_call", "torch_dtype", "matrix_dtypes", "training_dtypes",
           "vector_dtypes", "bench_gemm", "bench_bmm", "bench_conv2d", "bench_attention", "bench_maxpool",
           "MATRIX_BENCHES"]


# ──── Work counts ───────────────────────────────────────────────────────────────────────────────────

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


# ──── Grids ─────────────────────────────────────────────────────────────────────────────────────────

GRID_NAMES = ("tiny", "quick", "full")


@dataclass(frozen=True)
class Grid:
    """Shapes per benchmark. Tuples are (m, n, k), (batch, m, n, k), (N, C, H, W, K, R, S, stride, pad,
    groups), (batch, heads, seq, head_dim), (rows, cols), (vocab, dim, tokens), (tensors, numel)."""

    name: str
    plan: TimingPlan
    gemm: tuple[tuple[int, int, int], ...]
    bmm: tuple[tuple[int, int, int, int], ...]
    conv: tuple[tuple[int, ...], ...]
    attention: tuple[tuple[int, int, int, int], ...]
    elementwise_numel: tuple[int, ...]
    elementwise_ops: tuple[str, ...]
    rows_cols: tuple[tuple[int, int], ...]
    batchnorm: tuple[tuple[int, int, int, int], ...]
    embedding: tuple[tuple[int, int, int], ...]
    copy_numel: tuple[int, ...]
    optimizer: tuple[tuple[int, int], ...]
    h2d_bytes: tuple[int, ...]
    collective_bytes: tuple[int, ...]
    collective_world_sizes: tuple[int, ...]
    collective_ops: tuple[str, ...]
    backward: bool = True
    first_touch_numel: tuple[int, ...] = ()
    maxpool: tuple[tuple[int, ...], ...] = ()
    """(N, C, H, W, kernel, stride, pad) of the max-pooling bench (forward and backward)."""
    rng_numel: tuple[int, ...] = ()
    """Elements per call of the random-draw bench (calibrate/bench_memory.py; CPU)."""
    step_state_numel: tuple[int, ...] = ()
    """fp32 elements of the relu calls timed cold and warm (calibrate/bench_memory.py; CPU), besides
    the tiny matmul that gives the fixed cost: sizes whose streams the cold rate is read from."""
    conv_layout: tuple[tuple[int, ...], ...] = ()
    """Conv shapes (as ``conv``) timed over NCHW and channels-last activations (calibrate/bench_memory.py;
    CPU): large maps, where the layout reorders are a visible share of the time."""


_ALL_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
_EW_OPS = ("add", "mul", "relu", "gelu", "silu")

_TINY = Grid(
    name="tiny", plan=TimingPlan(warmup=1, repeats=3, min_sample_s=5e-4, max_total_s=0.05),
    gemm=((64, 64, 64), (255, 255, 255), (512, 512, 512)), bmm=((8, 64, 64, 64),),
    conv=((2, 16, 16, 16, 16, 3, 3, 1, 1, 1), (2, 32, 16, 16, 32, 3, 3, 1, 1, 32)),
    attention=((1, 2, 64, 32),), elementwise_numel=(4096, 1 << 20), elementwise_ops=("add", "gelu"),
    rows_cols=((64, 256),), batchnorm=((4, 16, 16, 16),), embedding=((1000, 64, 256),),
    copy_numel=(1 << 12, 1 << 16, 1 << 20, 1 << 22), optimizer=((4, 1 << 14),), h2d_bytes=(1 << 20,),
    collective_bytes=(1 << 12, 1 << 20), collective_world_sizes=(2,), collective_ops=("all_reduce",),
    first_touch_numel=(12 << 20,), maxpool=((2, 16, 16, 16, 2, 2, 0),), rng_numel=(1 << 16,),
    conv_layout=((2, 64, 28, 28, 64, 1, 1, 1, 0, 1),), step_state_numel=(1 << 16,),
)

_QUICK = Grid(
    name="quick", plan=TimingPlan(warmup=2, repeats=7, min_sample_s=4e-3, max_total_s=0.5),
    gemm=((64, 64, 64), (128, 128, 128), (256, 256, 256), (512, 512, 512), (1024, 1024, 1024),
          (127, 127, 127), (255, 511, 129), (1000, 1000, 1000), (2048, 256, 512), (64, 1024, 1024),
          (4096, 64, 64), (96, 768, 3072)),
    bmm=((32, 64, 64, 64), (16, 128, 128, 64), (8, 256, 256, 256)),
    conv=((8, 64, 28, 28, 64, 3, 3, 1, 1, 1), (8, 64, 28, 28, 256, 1, 1, 1, 0, 1),
          (8, 128, 28, 28, 128, 3, 3, 1, 1, 128), (8, 64, 28, 28, 64, 3, 3, 1, 1, 4),
          (4, 3, 64, 64, 32, 7, 7, 2, 3, 1), (8, 64, 32, 32, 128, 3, 3, 2, 1, 1),
          (8, 128, 16, 16, 256, 1, 1, 2, 0, 1), (8, 256, 4, 4, 256, 3, 3, 1, 1, 1),
          (16, 128, 8, 8, 128, 3, 3, 1, 1, 128)),
    attention=((2, 4, 128, 64), (1, 8, 512, 64), (4, 4, 256, 32)),
    elementwise_numel=(4096, 1 << 18, 1 << 22), elementwise_ops=_EW_OPS,
    rows_cols=((256, 768), (2048, 1024)), batchnorm=((8, 64, 28, 28),),
    embedding=((32000, 256, 2048), (1000, 64, 128)),
    copy_numel=(1 << 10, 1 << 14, 1 << 18, 1 << 21, 1 << 23, 1 << 25), optimizer=((32, 1 << 15),),
    h2d_bytes=(1 << 16, 1 << 20, 1 << 24, 1 << 27),
    collective_bytes=(1 << 10, 1 << 14, 1 << 18, 1 << 22), collective_world_sizes=(2,),
    collective_ops=_ALL_COLLECTIVES, first_touch_numel=(12 << 20, 24 << 20),
    maxpool=((8, 64, 32, 32, 2, 2, 0), (8, 64, 56, 56, 3, 2, 1), (16, 128, 16, 16, 2, 2, 0), (8, 32, 8, 8, 2, 2, 0)),
    rng_numel=(1 << 18, 1 << 20, 1 << 22), step_state_numel=(1 << 18, 1 << 20),
    # ResNet-50's conv2_x 1×1 reduce and 3×3 (He et al. 2016, Table 1); dense only (bench_memory.py)
    conv_layout=((8, 256, 56, 56, 64, 1, 1, 1, 0, 1), (8, 64, 56, 56, 64, 3, 3, 1, 1, 1)),
)

_FULL = replace(
    _QUICK, name="full", plan=TimingPlan(warmup=3, repeats=15, min_sample_s=5e-3, max_total_s=1.0),
    gemm=_QUICK.gemm + ((32, 32, 32), (2048, 2048, 2048), (1536, 1536, 1536), (511, 511, 511),
                        (1023, 1023, 1023), (333, 777, 555), (4096, 1024, 256), (512, 4096, 512),
                        (1, 4096, 4096), (16, 4096, 1024), (8192, 128, 128), (384, 384, 2048),
                        # short reductions: a small batch's weight gradient (k = batch)
                        (256, 784, 8), (1024, 1024, 16)),
    bmm=_QUICK.bmm + ((64, 32, 32, 32), (4, 512, 512, 128), (12, 128, 64, 128)),
    conv=_QUICK.conv + ((16, 128, 14, 14, 128, 3, 3, 1, 1, 1), (16, 256, 14, 14, 512, 1, 1, 2, 0, 1),
                        (16, 32, 56, 56, 32, 3, 3, 1, 1, 32), (2, 256, 7, 7, 256, 3, 3, 1, 1, 1),
                        (16, 96, 28, 28, 96, 3, 3, 1, 1, 2), (16, 512, 2, 2, 512, 3, 3, 1, 1, 1),
                        (8, 32, 32, 32, 32, 3, 3, 2, 1, 32), (16, 64, 16, 16, 64, 1, 1, 1, 0, 1),
                        (8, 16, 8, 8, 16, 3, 3, 1, 1, 1), (8, 128, 8, 8, 128, 3, 3, 1, 1, 32),
                        (16, 64, 8, 8, 128, 3, 3, 2, 1, 1), (4, 384, 3, 3, 384, 3, 3, 1, 1, 1),
                        # the CIFAR ResNets' stages (He et al. 2016, §4.2: 16 / 32 / 64 filters on 32² /
                        # 16² / 8² maps): dense 3×3 at 32 channels, between the rows above
                        (8, 32, 16, 16, 32, 3, 3, 1, 1, 1), (8, 16, 32, 32, 16, 3, 3, 1, 1, 1),
                        (8, 32, 32, 32, 64, 3, 3, 2, 1, 1),
                        # depthwise 3×3 on the maps of MobileNet's later stages (Howard et al. 2017,
                        # Table 1: 14² and 7² at 224 px; 8² and 4² at 32 px), their own kernel
                        # (cost/compute.py DEPTHWISE_CONV_KIND), strided and not
                        # (+ the quick grid's 8² one)
                        (16, 256, 14, 14, 256, 3, 3, 1, 1, 256), (16, 512, 7, 7, 512, 3, 3, 1, 1, 512),
                        (16, 256, 4, 4, 256, 3, 3, 1, 1, 256), (16, 64, 16, 16, 64, 3, 3, 2, 1, 64)),
    attention=_QUICK.attention + ((1, 8, 1024, 64), (8, 8, 64, 64), (1, 12, 256, 128)),
    elementwise_numel=(1024, 16384, 1 << 18, 1 << 20, 1 << 22, 1 << 24),
    rows_cols=((64, 256), (256, 768), (2048, 1024), (8192, 4096)),
    batchnorm=((8, 64, 28, 28), (32, 128, 14, 14), (2, 16, 8, 8)),
    embedding=((32000, 256, 2048), (1000, 64, 128), (50000, 768, 4096)),
    # every 4× from 1 KiB, and 2× around a last-level cache's size (8 to 128 MiB moved), where the
    # fit places the effective cache capacity (fit_compute._CACHE)
    copy_numel=tuple(sorted({1 << p for p in range(8, 27, 2)} | {1 << 21, 1 << 23})),
    optimizer=((32, 1 << 15), (8, 1 << 19), (256, 1024), (4, 1024)),
    collective_bytes=tuple(1 << p for p in range(8, 25, 2)), collective_world_sizes=(2, 4),
    # + ResNet-50's conv3_x 1×1 reduce and expand
    conv_layout=_QUICK.conv_layout + ((8, 512, 28, 28, 128, 1, 1, 1, 0, 1), (8, 128, 28, 28, 512, 1, 1, 1, 0, 1)),
)


def _scale_for_cuda(g: Grid) -> Grid:
    """GPUs need far larger ops to approach their ceiling: add big GEMMs, attention and copies."""
    return replace(
        g, gemm=g.gemm + ((4096, 4096, 4096), (8192, 8192, 8192), (8191, 8191, 8191), (16384, 4096, 4096)),
        # convolutions large enough to leave the host's issue time behind (on an H200 every conv of
        # the CPU grid ran in the host's 15–50 µs per call): ResNet's 224 px stages at batch 8 and 32
        # (He et al. 2016, Table 1: 56² × 64 … 7² × 512), its 7×7 stem, a bottleneck 1×1, and a
        # depthwise and a grouped 3×3 at MobileNet / ResNeXt widths
        conv=g.conv + ((8, 64, 56, 56, 64, 3, 3, 1, 1, 1), (32, 64, 56, 56, 64, 3, 3, 1, 1, 1),
                       (32, 128, 28, 28, 128, 3, 3, 1, 1, 1), (32, 256, 14, 14, 256, 3, 3, 1, 1, 1),
                       (32, 512, 7, 7, 512, 3, 3, 1, 1, 1), (8, 3, 224, 224, 64, 7, 7, 2, 3, 1),
                       (32, 256, 56, 56, 64, 1, 1, 1, 0, 1), (32, 256, 28, 28, 256, 3, 3, 1, 1, 256),
                       (32, 256, 28, 28, 256, 3, 3, 1, 1, 32)),
        attention=g.attention + ((4, 16, 2048, 128), (1, 32, 4096, 128), (8, 12, 197, 64)),
        elementwise_numel=g.elementwise_numel + (1 << 26, 1 << 28),
        copy_numel=g.copy_numel + (1 << 27, 1 << 29), optimizer=g.optimizer + ((64, 1 << 22),),
        collective_bytes=g.collective_bytes + (1 << 26, 1 << 28))


def grid_for(name: str, device: str) -> Grid:
    """The named grid, enlarged for CUDA (except ``tiny``)."""
    grids = {"tiny": _TINY, "quick": _QUICK, "full": _FULL}
    if name not in grids:
        raise ValueError(f"grid must be one of {', '.join(GRID_NAMES)}, got {name!r}")
    g = grids[name]
    return _scale_for_cuda(g) if (device == "cuda" and name != "tiny") else g


# ──── Matrix-class benches ──────────────────────────────────────────────────────────────────────────

def torch_dtype(dtype: DType):
    """tf32 is fp32 storage; the matmul precision switch (see :func:`_precision`) selects the rate."""
    import torch
    return {DType.FP32: torch.float32, DType.TF32: torch.float32, DType.BF16: torch.bfloat16,
            DType.FP16: torch.float16}[dtype]


def matrix_dtypes(device: str) -> tuple[DType, ...]:
    """fp32 on CPU (the path CPU training uses); on CUDA the tensor-core dtypes and true fp32 (what
    fp32 training runs: PyTorch leaves TF32 off for matmuls by default)."""
    return (DType.FP32,) if device == "cpu" else (DType.BF16, DType.FP16, DType.TF32, DType.FP32)


def training_dtypes(device: str) -> tuple[DType, ...]:
    """The precisions models train in, for the benches too slow to run in every matrix dtype
    (convolutions, attention): fp32 on CPU; bf16 and true fp32 on CUDA."""
    return (DType.FP32,) if device == "cpu" else (DType.BF16, DType.FP32)


def vector_dtypes(device: str) -> tuple[DType, ...]:
    return (DType.FP32,) if device == "cpu" else (DType.BF16, DType.FP32)


@contextlib.contextmanager
def _precision(dtype: DType) -> Iterator[None]:
    """Allow TF32 tensor cores only for tf32 rows; fp32 rows run true fp32 (restored afterwards)."""
    import torch
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = dtype is DType.TF32
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@dataclass(frozen=True)
class Bench:
    """Where and how hard to time; builds one :class:`Row` per timed callable."""

    device: str
    plan: TimingPlan
    autograd_call_s: float = 0.0
    """Fixed cost of one ``torch.autograd.grad`` call, subtracted from backward rows."""

    def row(self, bench: str, op_class: OpClass | None, dtype: DType, params: dict[str, Any],
            work: tuple[float, float], fn: Callable[[], object], phase: str = "fw", calls: int = 1) -> Row:
        t = time_call(fn, self.plan, self.device)
        return Row(bench=bench, op_class=op_class, dtype=dtype, params=params, flops=work[0],
                   bytes_moved=work[1], median_s=t.median_s, p10_s=t.p10_s, p90_s=t.p90_s,
                   repeats=t.repeats, phase=phase, calls=calls, device=self.device, ci_low_s=t.ci_low_s,
                   ci_high_s=t.ci_high_s)

    def row_pair(self, bench: str, params: dict[str, Any], flag: str, work: tuple[float, float],
                 with_cost: Callable[[], object], without: Callable[[], object]) -> list[Row]:
        """Two rows (``flag`` True: ``with_cost``; False: ``without``) timed with alternated samples
        (:func:`time_pair`), for benches whose result is the difference of the two."""
        rows = []
        for on, t in zip((True, False), time_pair(with_cost, without, self.plan, self.device), strict=True):
            rows.append(Row(bench=bench, op_class=None, dtype=DType.FP32, params=dict(params, **{flag: on}),
                            flops=work[0], bytes_moved=work[1], median_s=t.median_s, p10_s=t.p10_s,
                            p90_s=t.p90_s, repeats=t.repeats, device=self.device, ci_low_s=t.ci_low_s,
                            ci_high_s=t.ci_high_s))
        return rows

    def randn(self, *shape: int, dtype: DType = DType.FP32, grad: bool = False):
        import torch
        return torch.randn(*shape, dtype=torch_dtype(dtype), device=self.device, requires_grad=grad)

    def fw_bw(self, bench: str, op_class: OpClass, dtype: DType, params: dict[str, Any],
              work_fw: tuple[float, float], work_bw: tuple[float, float] | None,
              forward: Callable[[], object], inputs: tuple, bw_calls: int = 2) -> list[Row]:
        """Time ``forward`` (no grad) and, when ``work_bw`` is given, its backward w.r.t. ``inputs``.
        ``bw_calls``: ops the estimator costs the backward as (activation-gradient + weight-gradient
        = 2 for GEMM and conv; 1 for attention, which has no weights)."""
        import torch
        with _precision(dtype):
            with torch.no_grad():
                rows = [self.row(bench, op_class, dtype, params, work_fw, forward)]
            if work_bw is not None:
                out = forward()
                grad_out = torch.randn_like(out)
                raw = self.row(bench, op_class, dtype, params, work_bw,
                               lambda: torch.autograd.grad(out, inputs, grad_out, retain_graph=True),
                               phase="bw", calls=bw_calls)
                rows.append(self.net_of_engine(raw))
        return rows

    def net_of_engine(self, raw: Row) -> Row:
        """``raw`` less the engine's per-call cost (floored at 10 % of the raw times)."""
        cut = min(self.autograd_call_s, 0.9 * raw.median_s)
        lo, hi = raw.ci_low_s, raw.ci_high_s
        return replace(raw, median_s=raw.median_s - cut, p10_s=max(raw.p10_s - cut, 0.1 * raw.p10_s),
                       p90_s=raw.p90_s - cut, params=dict(raw.params, autograd_call_s=cut),
                       ci_low_s=None if lo is None else max(lo - cut, 0.1 * lo),
                       ci_high_s=None if hi is None else hi - cut)


def bench_autograd_call(b: Bench) -> Row:
    """The autograd engine's fixed cost per ``torch.autograd.grad`` call: backward of y = 2·x, x one
    element (one trivial kernel: 1 FLOP, 8 bytes; the rest is the engine)."""
    import torch
    x = torch.ones(1, device=b.device, requires_grad=True)
    y = x * 2
    g = torch.ones_like(y)
    return b.row("autograd_call", None, DType.FP32, {"numel": 1}, (1.0, 8.0),
                 lambda: torch.autograd.grad(y, (x,), g, retain_graph=True), phase="bw")


def bench_gemm(b: Bench, grid: Grid) -> list[Row]:
    """C = A @ B over ``grid.gemm`` (m, n, k)."""
    rows: list[Row] = []
    for dtype in matrix_dtypes(b.device):
        e = DTYPE_BYTES[dtype]
        for m, n, k in grid.gemm:
            a, w = b.randn(m, k, dtype=dtype, grad=True), b.randn(k, n, dtype=dtype, grad=True)
            bw = gemm_counts(m, n, k, e, backward=True) if grid.backward else None
            rows += b.fw_bw("gemm", OpClass.MATMUL, dtype, {"m": m, "n": n, "k": k},
                            gemm_counts(m, n, k, e), bw, lambda a=a, w=w: a @ w, (a, w))
    return rows


def bench_bmm(b: Bench, grid: Grid) -> list[Row]:
    """torch.bmm over ``grid.bmm`` (batch, m, n, k)."""
    import torch
    rows: list[Row] = []
    for dtype in matrix_dtypes(b.device):
        e = DTYPE_BYTES[dtype]
        for bt, m, n, k in grid.bmm:
            a, w = b.randn(bt, m, k, dtype=dtype, grad=True), b.randn(bt, k, n, dtype=dtype, grad=True)
            bw = gemm_counts(m, n, k, e, batch=bt, backward=True) if grid.backward else None
            rows += b.fw_bw("bmm", OpClass.MATMUL, dtype, {"batch": bt, "m": m, "n": n, "k": k},
                            gemm_counts(m, n, k, e, batch=bt), bw,
                            lambda a=a, w=w: torch.bmm(a, w), (a, w))
    return rows


def bench_conv2d(b: Bench, grid: Grid) -> list[Row]:
    """F.conv2d (no bias) over ``grid.conv``; groups == C is depthwise."""
    import torch.nn.functional as F
    rows: list[Row] = []
    for dtype in training_dtypes(b.device):
        e = DTYPE_BYTES[dtype]
        for n, c, h, w, k, r, s, stride, pad, groups in grid.conv:
            x = b.randn(n, c, h, w, dtype=dtype, grad=True)
            wt = b.randn(k, c // groups, r, s, dtype=dtype, grad=True)
            p, q = conv2d_out_hw(h, w, r, s, stride, pad)
            params = {"n": n, "c": c, "h": h, "w": w, "k": k, "r": r, "s": s, "stride": stride,
                      "pad": pad, "groups": groups, "p": p, "q": q}
            geom = (n, c, h, w, k, r, s, stride, pad, groups, e)
            bw = conv2d_counts(*geom, backward=True) if grid.backward else None
            fn = functools.partial(F.conv2d, x, wt, None, stride, pad, 1, groups)
            rows += b.fw_bw("conv2d", OpClass.CONV, dtype, params, conv2d_counts(*geom), bw, fn, (x, wt))
    return rows


def bench_attention(b: Bench, grid: Grid) -> list[Row]:
    """F.scaled_dot_product_attention over ``grid.attention`` (batch, heads, seq, head_dim), causal and not."""
    import torch.nn.functional as F
    rows: list[Row] = []
    for dtype in training_dtypes(b.device):
        e = DTYPE_BYTES[dtype]
        for bt, heads, seq, d in grid.attention:
            q, k, v = (b.randn(bt, heads, seq, d, dtype=dtype, grad=True) for _ in range(3))
            for causal in (False, True):
                shape = (bt, heads, seq, seq, d, causal, e)
                params = {"batch": bt, "heads": heads, "seq_q": seq, "seq_kv": seq, "head_dim": d,
                          "causal": causal}
                bw = attention_counts(*shape, backward=True) if grid.backward else None
                fn = functools.partial(F.scaled_dot_product_attention, q, k, v, is_causal=causal)
                rows += b.fw_bw("sdpa", OpClass.ATTENTION, dtype, params, attention_counts(*shape),
                                bw, fn, (q, k, v), bw_calls=1)
    return rows


def bench_maxpool(b: Bench, grid: Grid) -> list[Row]:
    """F.max_pool2d with indices (what training runs: ``max_pool2d_with_indices`` and its backward)
    over ``grid.maxpool``; rows are reduction-class with bench name = the graph's op kind ``maxpool``,
    so they calibrate that kind's own curve (``Efficiency.kind_compute``)."""
    import torch.nn.functional as F
    rows: list[Row] = []
    for dtype in vector_dtypes(b.device)[:1]:
        e = DTYPE_BYTES[dtype]
        for n, c, h, w, k, stride, pad in grid.maxpool:
            x = b.randn(n, c, h, w, dtype=dtype, grad=True)
            geom = (n, c, h, w, k, stride, pad, e)
            params = {"n": n, "c": c, "h": h, "w": w, "kernel": k, "stride": stride, "pad": pad}
            bw = maxpool2d_counts(*geom, backward=True) if grid.backward else None
            fn = functools.partial(F.max_pool2d, x, k, stride, pad, return_indices=True)
            rows += b.fw_bw("maxpool", OpClass.REDUCTION, dtype, params, maxpool2d_counts(*geom), bw,
                            lambda fn=fn: fn()[0], (x,), bw_calls=1)
    return rows


MATRIX_BENCHES = {"gemm": bench_gemm, "bmm": bench_bmm, "conv2d": bench_conv2d, "sdpa": bench_attention,
                  "maxpool": bench_maxpool}
