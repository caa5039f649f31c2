"""Vector-class and memory microbenchmarks through real PyTorch: elementwise and activation ops, norms,
softmax, embedding lookup, device memory copies, the optimizer step, and host↔device copies (CUDA).

Forward only (these ops' backward kernels are the same kind of streaming work, so the forward rows
constrain the same memory-side parameters), except the normalisations: on a CPU their backward loops
run at another rate per byte than their forward (batch norm's reductions over N·H·W per channel), and
each kind gets its own backward curve from them. Ops allocate their outputs as they do in training; the
copy benchmark writes into a preallocated buffer so it measures bandwidth alone.
"""

from __future__ import annotations

import functools

from simtrain.calibrate.bench_ops import (
    Bench,
    Grid,
    copy_counts,
    elementwise_counts,
    embedding_counts,
    norm_counts,
    optimizer_counts,
    softmax_counts,
    torch_dtype,
    vector_dtypes,
)
from simtrain.calibrate.records import Row
from simtrain.glossary import DTYPE_BYTES, DType, OpClass

__all__ = ["bench_elementwise", "bench_norms", "bench_softmax", "bench_embedding", "bench_copy",
           "bench_optimizer", "bench_host_device", "VECTOR_BENCHES"]


def _unary(name: str):
    import torch
    import torch.nn.functional as F
    return {"relu": torch.relu, "gelu": F.gelu, "silu": F.silu}[name]


def bench_elementwise(b: Bench, grid: Grid) -> list[Row]:
    """add, mul (binary) and relu, gelu, silu (unary) over ``grid.elementwise_numel`` elements."""
    import torch
    rows: list[Row] = []
    for dtype in vector_dtypes(b.device):
        e = DTYPE_BYTES[dtype]
        for numel in grid.elementwise_numel:
            x, y = b.randn(numel, dtype=dtype), b.randn(numel, dtype=dtype)
            for op in grid.elementwise_ops:
                if op in ("add", "mul"):
                    fn = functools.partial(getattr(torch, op), x, y)
                else:
                    fn = functools.partial(_unary(op), x)
                rows.append(b.row(op, OpClass.ELEMENTWISE, dtype, {"numel": numel},
                                  elementwise_counts(op, numel, e), fn))
    return rows


def _norm(b: Bench, grid: Grid, kind: str, dtype: DType, params: dict, x, channels: int, fn, inputs) -> list[Row]:
    """Forward and (grid.backward) backward rows of one normalisation; the backward is costed as the
    graph's two parts (activation and weight gradient)."""
    e = DTYPE_BYTES[dtype]
    bw = norm_counts(kind, x.numel(), channels, e, backward=True) if grid.backward else None
    return b.fw_bw(kind, OpClass.NORM, dtype, params, norm_counts(kind, x.numel(), channels, e), bw,
                   fn, inputs, bw_calls=2)


def _norm_rows(b: Bench, grid: Grid, dtype: DType, rows_n: int, cols: int) -> list[Row]:
    import torch.nn.functional as F
    x, w, bias = (b.randn(*shape, dtype=dtype, grad=True) for shape in ((rows_n, cols), (cols,), (cols,)))
    params = {"rows": rows_n, "cols": cols}
    out = _norm(b, grid, "layernorm", dtype, params, x, cols, lambda: F.layer_norm(x, (cols,), w, bias), (x, w, bias))
    if hasattr(F, "rms_norm"):
        out += _norm(b, grid, "rmsnorm", dtype, params, x, cols, lambda: F.rms_norm(x, (cols,), w), (x, w))
    return out


def bench_norms(b: Bench, grid: Grid) -> list[Row]:
    """layer_norm and rms_norm over (rows, cols); batch_norm (training mode) over (N, C, H, W)."""
    import torch
    import torch.nn.functional as F
    rows: list[Row] = []
    for dtype in vector_dtypes(b.device):
        for rows_n, cols in grid.rows_cols:
            rows += _norm_rows(b, grid, dtype, rows_n, cols)
        for n, c, h, w in grid.batchnorm:
            x, wt, bias = (b.randn(*shape, dtype=dtype, grad=True) for shape in ((n, c, h, w), (c,), (c,)))
            mean = torch.zeros(c, dtype=torch.float32, device=b.device)
            var = torch.ones(c, dtype=torch.float32, device=b.device)
            if dtype is not DType.FP32:
                mean, var = mean.to(torch_dtype(dtype)), var.to(torch_dtype(dtype))
            fn = functools.partial(F.batch_norm, x, mean, var, wt, bias, training=True)
            rows += _norm(b, grid, "batchnorm", dtype, {"n": n, "c": c, "h": h, "w": w}, x, c, fn, (x, wt, bias))
    return rows


def bench_softmax(b: Bench, grid: Grid) -> list[Row]:
    """softmax over the last dim of (rows, cols)."""
    rows: list[Row] = []
    for dtype in vector_dtypes(b.device):
        e = DTYPE_BYTES[dtype]
        for rows_n, cols in grid.rows_cols:
            x = b.randn(rows_n, cols, dtype=dtype)
            rows.append(b.row("softmax", OpClass.REDUCTION, dtype, {"rows": rows_n, "cols": cols},
                              softmax_counts(x.numel(), e), lambda x=x: x.softmax(-1)))
    return rows


def bench_embedding(b: Bench, grid: Grid) -> list[Row]:
    """F.embedding of ``tokens`` random indices into a (vocab, dim) table."""
    import torch
    import torch.nn.functional as F
    rows: list[Row] = []
    gen = torch.Generator().manual_seed(0)
    for dtype in vector_dtypes(b.device):
        e = DTYPE_BYTES[dtype]
        for vocab, dim, tokens in grid.embedding:
            table = b.randn(vocab, dim, dtype=dtype)
            idx = torch.randint(0, vocab, (tokens,), generator=gen).to(b.device)
            rows.append(b.row("embedding", OpClass.EMBEDDING, dtype, {"vocab": vocab, "dim": dim, "tokens": tokens},
                              embedding_counts(tokens, dim, e), lambda t=table, i=idx: F.embedding(i, t)))
    return rows


def bench_copy(b: Bench, grid: Grid) -> list[Row]:
    """dst.copy_(src) in device memory over ``grid.copy_numel`` fp32 elements (bandwidth vs size)."""
    rows: list[Row] = []
    for numel in grid.copy_numel:
        src, dst = b.randn(numel), b.randn(numel)
        rows.append(b.row("copy", OpClass.MEMORY, DType.FP32, {"numel": numel, "bytes": 4 * numel},
                          copy_counts(numel, 4), lambda s=src, d=dst: d.copy_(s)))
    return rows


def _optimizers(device: str):
    """(name, kind, implementation, factory): PyTorch's for-loop (``foreach=False``), multi-tensor
    (``foreach=True``) and fused (``fused=True``) paths, costed as ``TrainConfig.optimizer_impl`` is
    (simtrain/cost/optimizer.py; on CPU the foreach ops fall back to a per-tensor loop)."""
    import torch
    return [
        ("adamw_forloop", "adamw", "for-loop", lambda p: torch.optim.AdamW(p, foreach=False, fused=False)),
        ("adamw_foreach", "adamw", "foreach", lambda p: torch.optim.AdamW(p, foreach=True)),
        ("adamw_fused", "adamw", "fused", lambda p: torch.optim.AdamW(p, fused=True)),
        ("sgd_forloop", "sgd", "for-loop", lambda p: torch.optim.SGD(p, lr=1e-3, foreach=False)),
        ("sgd_foreach", "sgd", "foreach", lambda p: torch.optim.SGD(p, lr=1e-3, foreach=True)),
        # SGD with momentum as the zoo's CNNs and most users' ones train: its own per-tensor overhead
        ("momentum_fused", "momentum", "fused", lambda p: torch.optim.SGD(p, lr=1e-3, momentum=0.9, fused=True)),
    ]


def bench_optimizer(b: Bench, grid: Grid) -> list[Row]:
    """One optimizer.step() over ``tensors`` fp32 parameters of ``numel`` elements with gradients set."""
    import torch
    rows: list[Row] = []
    for tensors, numel in grid.optimizer:
        params = [torch.nn.Parameter(b.randn(numel)) for _ in range(tensors)]
        for p in params:
            p.grad = b.randn(numel)
        for name, kind, impl, make in _optimizers(b.device):
            kind_of_device = "gpu" if b.device == "cuda" else "cpu"
            flops, nbytes, kernels = optimizer_counts(kind, tensors * numel, tensors, impl, kind_of_device)
            rows.append(b.row(name, OpClass.ELEMENTWISE, DType.FP32,
                              {"tensors": tensors, "numel": numel, "optimizer": kind, "impl": impl,
                               "fused": impl == "fused"},
                              (flops, nbytes), make(params).step, phase="optim", calls=kernels))
    return rows


def bench_host_device(b: Bench, grid: Grid) -> list[Row]:
    """CUDA only: host→device and device→host copies from pinned and pageable host memory."""
    import torch
    if b.device != "cuda":
        return []
    rows: list[Row] = []
    for nbytes in grid.h2d_bytes:
        dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        for pinned in (True, False):
            host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)
            params = {"bytes": nbytes, "pinned": pinned}
            rows.append(b.row("h2d", None, DType.INT8, params, (0.0, float(nbytes)),
                              lambda d=dev, h=host, p=pinned: d.copy_(h, non_blocking=p)))
            rows.append(b.row("d2h", None, DType.INT8, params, (0.0, float(nbytes)),
                              lambda d=dev, h=host, p=pinned: h.copy_(d, non_blocking=p)))
    return rows


VECTOR_BENCHES = {"elementwise": bench_elementwise, "norms": bench_norms, "softmax": bench_softmax,
                  "embedding": bench_embedding, "copy": bench_copy, "optimizer": bench_optimizer,
                  "host_device": bench_host_device}
