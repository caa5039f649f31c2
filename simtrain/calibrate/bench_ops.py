"""The matrix-class microbenchmarks (GEMM, batched matmul, conv2d, scaled-dot-product attention,
max pooling), forward and backward, through real PyTorch, and what every bench shares (:class:`Bench`).
The ops' work counts are in :mod:`simtrain.calibrate.work_counts`, the shapes each bench runs in
:mod:`simtrain.calibrate.bench_grids`, timing one callable in :mod:`simtrain.calibrate.timing`; their
names are re-exported here.

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

from simtrain.calibrate.bench_grids import GRID_NAMES, Grid, grid_for  # noqa: F401  (re-exported)
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
from simtrain.calibrate.work_counts import (  # noqa: F401  (re-exported)
    ELEMENTWISE_FLOPS_PER_ELEMENT,
    ELEMENTWISE_TENSORS,
    Counts,
    attention_counts,
    conv2d_counts,
    conv2d_out_hw,
    copy_counts,
    counted_causal_fraction,
    elementwise_counts,
    embedding_counts,
    gemm_counts,
    maxpool2d_counts,
    norm_counts,
    optimizer_counts,
    softmax_counts,
)
from simtrain.glossary import DTYPE_BYTES, DType, OpClass

__all__ = ["Timing", "TimingPlan", "time_call", "time_pair", "timing_of", "synchronize", "median_ci",
           "gemm_counts", "conv2d_counts", "conv2d_out_hw", "attention_counts", "counted_causal_fraction",
           "ELEMENTWISE_FLOPS_PER_ELEMENT", "ELEMENTWISE_TENSORS", "elementwise_counts", "norm_counts",
           "softmax_counts", "embedding_counts", "copy_counts", "optimizer_counts", "Grid", "grid_for",
           "GRID_NAMES", "Bench", "bench_autograd_call", "torch_dtype", "matrix_dtypes", "training_dtypes",
           "vector_dtypes", "bench_gemm", "bench_bmm", "bench_conv2d", "bench_attention", "bench_maxpool",
           "MATRIX_BENCHES"]


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
