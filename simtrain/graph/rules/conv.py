"""Convolutions (``conv1d``, ``conv2d``) and pooling (``maxpool2d``, ``avgpool2d``,
``adaptive_avgpool2d``, ``global_avgpool``).

Convolution counting (one FMA = 2 FLOPs). Per sample, with P output positions (∏ out spatial),
C_out output channels, groups g and a kernel of K = (C_in / g)·∏kernel taps per output:

* forward  2·P·C_out·K                         (each output is a K-term dot product)
* agrad    2·P·C_out·K                         (the transposed convolution touches the same pairs;
                                                zero when the input needs no gradient: the image)
* wgrad    2·P·C_out·K                         (dW accumulates the same products over positions)

Output size per spatial dim: ⌊(in + 2·pad − dil·(k − 1) − 1) / stride⌋ + 1 (PyTorch Conv2d docs).
The bias add/reduction is not counted as FLOPs (as for ``linear``). PyTorch keeps the input.

Pooling counts one FLOP per element of each window (a compare for max, an add for average);
max-pooling keeps its input *and* int64 indices of the maxima (``max_pool2d_with_indices``
backward takes both); average pooling keeps its input (``avg_pool2d_backward`` takes ``self``).
``global_avgpool`` is a mean over the spatial dims — ATen's ``adaptive_avg_pool2d`` with a 1×1
output takes this path too — and a mean keeps no tensor.
"""

from __future__ import annotations

from collections.abc import Iterable

from simtrain.glossary import OpClass
from simtrain.graph.op import Gemm, Saved
from simtrain.graph.rules._util import attrs_of, elements, nonneg_int, pc, pos_int
from simtrain.graph.rules.registry import rule

__all__ = ["conv", "conv_out_size", "maxpool2d", "avgpool2d", "adaptive_avgpool2d", "global_avgpool"]

INDEX_BYTES = 8  # int64 indices


def _tuple(label: str, value: int | Iterable[int], nd: int, minimum: int = 1) -> tuple[int, ...]:
    vals = (value,) * nd if isinstance(value, int) else tuple(value)
    if len(vals) != nd:
        raise ValueError(f"{label} must have {nd} entries, got {vals!r}")
    check = pos_int if minimum else nonneg_int
    return tuple(check(f"{label}[{i}]", v) for i, v in enumerate(vals))


def conv_out_size(size: int, kernel: int, stride: int = 1, padding: int = 0, dilation: int = 1) -> int:
    """Output length of one spatial dim (PyTorch Conv/Pool formula, floor mode)."""
    out = (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1
    if out < 1:
        raise ValueError(f"kernel {kernel} (dilation {dilation}) does not fit input {size} with padding {padding}")
    return out


def _conv_fields(c_in: int, c_out: int, size: tuple[int, ...], kernel: tuple[int, ...], stride, padding,
                 dilation, groups: int, bias: bool, input_grad: bool) -> dict:
    if c_in % groups or c_out % groups:
        raise ValueError(f"groups={groups} must divide in_channels={c_in} and out_channels={c_out}")
    out_sp = tuple(conv_out_size(s, k, st, p, d) for s, k, st, p, d in zip(size, kernel, stride, padding, dilation, strict=True))
    positions, taps = elements(out_sp), elements(kernel)
    k_dot = (c_in // groups) * taps
    fl = 2 * positions * c_out * k_dot
    in_el, out_el = c_in * elements(size), c_out * positions
    matrix, bias_n = c_out * k_dot, (c_out if bias else 0)
    weights = matrix + bias_n
    return dict(
        op_class=OpClass.CONV,
        flops=pc(fl, fl if input_grad else 0, fl),
        act_read=pc(in_el, out_el if input_grad else 0, out_el + in_el),
        act_write=pc(out_el, in_el if input_grad else 0, 0),
        weight_read=pc(weights, matrix if input_grad else 0, weights),
        weight_write=pc(0, 0, weights),
        param_count=weights, saved=Saved(act=in_el),
        shapes=((c_in, *size),), out_shape=(c_out, *out_sp),
        gemm=Gemm(m=positions, n=c_out // groups, k=k_dot, batch=groups),
        attrs=attrs_of(saved_input_elements=in_el, stride=stride, padding=padding, dilation=dilation,
                       groups=groups, kernel=kernel, input_grad=input_grad, bias=bias),
    )


def _conv(nd: int):
    def conv_nd(*, in_channels: int, out_channels: int, kernel_size, input_size, stride=1, padding=0,
                dilation=1, groups: int = 1, bias: bool = True, input_grad: bool = True) -> dict:
        return _conv_fields(pos_int("in_channels", in_channels), pos_int("out_channels", out_channels),
                            _tuple("input_size", input_size, nd), _tuple("kernel_size", kernel_size, nd),
                            _tuple("stride", stride, nd), _tuple("padding", padding, nd, minimum=0),
                            _tuple("dilation", dilation, nd), pos_int("groups", groups), bias, input_grad)
    conv_nd.__doc__ = f"A {nd}-d convolution; ``input_size`` is the per-sample spatial size (see module doc)."
    return conv_nd


conv = rule("conv2d")(_conv(2))
rule("conv1d")(_conv(1))


def _pool_geometry(channels, input_size, kernel_size, stride, padding):
    c = pos_int("channels", channels)
    size = _tuple("input_size", input_size, 2)
    kernel = _tuple("kernel_size", kernel_size, 2)
    stride_t = kernel if stride is None else _tuple("stride", stride, 2)
    pad = _tuple("padding", padding, 2, minimum=0)
    out_sp = tuple(conv_out_size(s, k, st, p) for s, k, st, p in zip(size, kernel, stride_t, pad, strict=True))
    return c, size, kernel, stride_t, pad, out_sp


def _pool_fields(c, size, out_sp, window: int, saved: Saved, fixed_fw_write: float, extra_attrs) -> dict:
    in_el, out_el = c * elements(size), c * elements(out_sp)
    return dict(
        op_class=OpClass.REDUCTION,
        flops=pc(out_el * window, out_el * window, 0),
        act_read=pc(in_el, out_el, 0), act_write=pc(out_el, in_el, 0),
        fixed_write_bytes=pc(fixed_fw_write, 0, 0), fixed_read_bytes=pc(0, fixed_fw_write, 0),
        saved=saved, shapes=((c, *size),), out_shape=(c, *out_sp),
        attrs=attrs_of(saved_input_elements=saved.act or None, window=window, **extra_attrs),
    )


@rule("maxpool2d")
def maxpool2d(*, channels: int, input_size, kernel_size, stride=None, padding=0) -> dict:
    """Max pooling: forward one compare per window element; backward scatters each output's
    gradient to its argmax (one add per window element, counted like the forward)."""
    c, size, kernel, st, pad, out_sp = _pool_geometry(channels, input_size, kernel_size, stride, padding)
    idx = c * elements(out_sp) * INDEX_BYTES
    saved = Saved(act=c * elements(size), fixed_bytes=idx)
    return _pool_fields(c, size, out_sp, elements(kernel), saved, idx,
                        dict(kernel=kernel, stride=st, padding=pad, index_bytes=idx))


@rule("avgpool2d")
def avgpool2d(*, channels: int, input_size, kernel_size, stride=None, padding=0) -> dict:
    """Average pooling: one add per window element (the divide folded in); backward spreads each
    output gradient over its window (one FLOP per window element)."""
    c, size, kernel, st, pad, out_sp = _pool_geometry(channels, input_size, kernel_size, stride, padding)
    return _pool_fields(c, size, out_sp, elements(kernel), Saved(act=c * elements(size)), 0,
                        dict(kernel=kernel, stride=st, padding=pad))


@rule("adaptive_avgpool2d")
def adaptive_avgpool2d(*, channels: int, input_size, output_size) -> dict:
    """Adaptive average pooling to ``output_size``: every input element is added into (about) one
    output, so forward and agrad are one FLOP per input element. A 1×1 output is a mean in ATen
    and keeps nothing; otherwise ``_adaptive_avg_pool2d_backward`` takes the input."""
    c = pos_int("channels", channels)
    size, out_sp = _tuple("input_size", input_size, 2), _tuple("output_size", output_size, 2)
    window = max(1, elements(size) // elements(out_sp))
    saved = Saved() if out_sp == (1, 1) else Saved(act=c * elements(size))
    return _pool_fields(c, size, out_sp, window, saved, 0, dict(output_size=out_sp))


@rule("global_avgpool")
def global_avgpool(*, channels: int, input_size) -> dict:
    """Mean over all spatial positions (one add per input element; backward one per input element)."""
    c = pos_int("channels", channels)
    size = tuple(pos_int(f"input_size[{i}]", d) for i, d in enumerate(input_size))
    return _pool_fields(c, size, (1,) * len(size), elements(size), Saved(), 0, {})
