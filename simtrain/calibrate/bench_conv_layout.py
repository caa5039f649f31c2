"""What a convolution over NCHW activations pays to convert them to its kernel's layout and back.

PyTorch keeps activations in NCHW unless a model asks for ``channels_last``. oneDNN's CPU convolution
kernels run on blocked (nChw8c / nChw16c) or NHWC layouts, so ``mkldnn_convolution`` reorders an NCHW
input into the kernel's layout and the output back: memory passes outside the kernel that do not
overlap its compute. The same convolution over channels-last tensors needs no reorder. The bench
times the forward of each shape both ways on the same data; the difference over the activation bytes
(input + output) is the rate the estimator charges per byte of a conv phase's activations
(``Efficiency.conv_layout_bytes_per_s``; ``cost/compute.py`` ``conv_layout_seconds``), the median
over shapes; a pair with t_nchw ≤ t_nhwc is left out.

Dense convolutions only. For grouped ones the channels-last path is another kernel, not the same one
without reorders: on this project's EPYC machine a groups-8 3×3 ran slower channels-last, and a
depthwise 3×3 gave 38 GB/s against 11–15 GB/s for dense shapes. Grouped and depthwise convolutions
keep their own fitted curve (``curve_kind``), which is timed over NCHW and so holds their layout
handling. GPUs are not measured: cuDNN picks NCHW kernels or transposes inside its own timing.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING

from simtrain.calibrate.bench_fresh_pages import slower_pairs
from simtrain.calibrate.records import Row
from simtrain.calibrate.work_counts import conv2d_counts, conv2d_out_hw

if TYPE_CHECKING:
    from simtrain.calibrate.bench_ops import Bench, Grid

__all__ = ["BENCH", "activation_bytes", "bench_conv_layout", "fit_conv_layout"]


BENCH = "conv_layout"


def activation_bytes(params, element_bytes: float = 4.0) -> float:
    """Bytes of a conv row's input (N·C·H·W) and output (N·K·P·Q), fp32 unless ``element_bytes``."""
    n, c, h, w, k = (int(params[x]) for x in ("n", "c", "h", "w", "k"))
    return element_bytes * (n * c * h * w + n * k * int(params["p"]) * int(params["q"]))


def bench_conv_layout(b: Bench, grid: Grid) -> list[Row]:
    """CPU only: forward ``F.conv2d`` (fp32, no grad) of each dense ``grid.conv_layout`` shape over NCHW
    tensors (``nchw`` True) and the same values in channels-last (False), samples alternated."""
    import functools

    import torch
    import torch.nn.functional as F
    if b.device != "cpu":
        return []
    rows: list[Row] = []
    for n, c, h, w, k, r, s, stride, pad, groups in grid.conv_layout:
        p, q = conv2d_out_hw(h, w, r, s, stride, pad)
        params = {"n": n, "c": c, "h": h, "w": w, "k": k, "r": r, "s": s, "stride": stride, "pad": pad,
                  "groups": groups, "p": p, "q": q}
        work = conv2d_counts(n, c, h, w, k, r, s, stride, pad, groups, 4)
        x, wt = b.randn(n, c, h, w), b.randn(k, c // groups, r, s)
        nhwc = torch.channels_last
        nchw_fn = functools.partial(F.conv2d, x, wt, None, stride, pad, 1, groups)
        nhwc_fn = functools.partial(F.conv2d, x.contiguous(memory_format=nhwc), wt.contiguous(memory_format=nhwc),
                                    None, stride, pad, 1, groups)
        with torch.no_grad():
            rows += b.row_pair(BENCH, params, "nchw", work, nchw_fn, nhwc_fn)
    return rows


def fit_conv_layout(rows: Sequence[Row]) -> dict[str, float]:
    """``conv_layout_bytes_per_s``: the median over dense shapes of activation bytes / (t_nchw − t_nhwc),
    pairs where NCHW is not slower left out; empty when no pair remains."""
    rates = [activation_bytes(on.params) / (on.median_s - off.median_s)
             for on, off in slower_pairs(rows, BENCH, "nchw") if int(on.params.get("groups", 1)) == 1]
    return {"conv_layout_bytes_per_s": statistics.median(rates)} if rates else {}
