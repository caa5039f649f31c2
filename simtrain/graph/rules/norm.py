"""Normalisations: ``layernorm``, ``rmsnorm``, ``batchnorm``, ``groupnorm``.

FLOPs are the natural count: one per arithmetic operation of the reference formula, per element
(a reduction contributes one add per element). Per normalised element:

| op         | forward                                   | agrad                                        | wgrad           |
|------------|-------------------------------------------|----------------------------------------------|-----------------|
| layer/batch/group norm | 8: mean 1, variance 3 (sub, sq, add), normalise 2 (sub, mul), affine 2 (mul, add) | 10: g = dY·γ 1, x̂ 2, g·x̂ 1, two means 2, combine 3, ×rstd 1 | 3: Σ dY·x̂ 2, Σ dY 1 |
| rmsnorm    | 4: square 1, mean 1, ×rstd 1, ×γ 1         | 7: g 1, x̂ 1, g·x̂ 1, mean 1, combine 2, ×rstd 1 | 2: Σ dY·x̂        |

(Per-row work — the rsqrt of the variance — is negligible and not counted.)

Saved (PyTorch ``native_layer_norm`` / ``native_batch_norm`` / ``native_group_norm`` / fused
``rms_norm``): the input (an activation) plus fp32 statistics. LayerNorm keeps mean and rstd per
row (8 B/row), RMSNorm rstd per row (4 B/row), GroupNorm mean and rstd per (sample, group). These
fp32 statistics are ``saved.fixed_bytes`` and also the ``stats_bytes`` attribute, so a check of
Korthikanti et al.'s Table 2 (which omits them) can subtract them. BatchNorm's statistics are per
*channel* for the whole micro-batch, not per sample: they are the attribute
``stats_bytes_per_batch`` (2·C·4 B) and not in ``saved``.

RMSNorm written as PyTorch ops in fp32 (``eager_fp32``: Meta's reference Llama ``RMSNorm``, torchtitan's
``norm_type = "rmsnorm"`` of 2024, HF ``LlamaRMSNorm``: ``(x.float() * rsqrt(x.float().pow(2).mean(-1) +
eps)).type_as(x) * γ``) runs each step as its own kernel, and autograd's backward of every one as more.
Bytes per normalised element, a = the activation dtype, fp32 intermediates 4 B (per-row rstd work not
counted; the chain as PyTorch's autograd runs it, counted under ``TorchDispatchMode`` in
tests/unit/test_eager_kernels.py):

| phase | kernels | activation elements read / written | fp32 bytes read / written |
|-------|---------|------------------------------------|---------------------------|
| fw    | 8: cast up, pow, mean, +eps, rsqrt, ×rstd, cast down, ×γ | 2 / 2 (x, x̂; x̂, y) | 16 / 12 |
| agrad | 14: dY·γ, cast up, g·x, g·rstd, Σ, pow, ×2, ×, mean's ÷, pow, ×2, ×, add, cast down | 2 / 2 | 44 / 32 |
| wgrad | 2: dY·x̂, Σ over rows | 3 / 1 | 0 / 0 |

At 16-bit activations that is 36 B forward and 92 B backward per element, against the fused kernel's
4 and 10: ×9 either way. It keeps the fp32 copy of x (pow and ×rstd save it: 4 B) and x̂ (×γ saves
it for γ's gradient: one activation element), not x.
"""

from __future__ import annotations

from simtrain.glossary import OpClass
from simtrain.graph.op import Saved
from simtrain.graph.rules._util import attrs_of, elements, pc, pos_int
from simtrain.graph.rules.registry import rule

__all__ = ["layernorm", "rmsnorm", "batchnorm", "groupnorm", "NORM_FLOPS", "RMS_FLOPS"]

NORM_FLOPS = (8, 10, 3)   # (fw, agrad, wgrad) per element: layer / batch / group norm
RMS_FLOPS = (4, 7, 2)     # rmsnorm
STAT_BYTES = 4            # fp32
#: eager fp32 RMSNorm per element (module table): kernels, activation elements read / written,
#: fp32 bytes read / written, each as (fw, agrad, wgrad).
EAGER_RMS_KERNELS = (8, 14, 2)
EAGER_RMS_ACT = ((2, 2, 3), (2, 2, 1))
EAGER_RMS_FP32_BYTES = ((16, 44, 0), (12, 32, 0))


def _norm_fields(n: int, shape: tuple[int, ...], weights: int, counts, saved: Saved, stats_bytes: float,
                 extra: dict) -> dict:
    fw, ag, wg = counts
    wg_n = wg * n if weights else 0
    return dict(
        op_class=OpClass.NORM, flops=pc(fw * n, ag * n, wg_n),
        act_read=pc(n, 2 * n, 2 * n if weights else 0), act_write=pc(n, n, 0),
        fixed_write_bytes=pc(stats_bytes, 0, 0), fixed_read_bytes=pc(0, stats_bytes, 0),
        weight_read=pc(weights, weights, weights), weight_write=pc(0, 0, weights),
        param_count=weights, saved=saved, shapes=(shape,), out_shape=shape, tp_split="sequence",
        runs_in_low_precision=False,
        attrs=attrs_of(saved_input_elements=n, stats_bytes=stats_bytes or None, **extra),
    )


@rule("layernorm")
def layernorm(*, rows: int, width: int, bias: bool = True, affine: bool = True) -> dict:
    """LayerNorm over the last dim (``width``) of ``rows`` rows per sample."""
    r, w = pos_int("rows", rows), pos_int("width", width)
    n, stats = r * w, 2 * STAT_BYTES * r
    weights = (w + (w if bias else 0)) if affine else 0
    return _norm_fields(n, (r, w), weights, NORM_FLOPS, Saved(act=n, fixed_bytes=stats), stats, {})


@rule("rmsnorm")
def rmsnorm(*, rows: int, width: int, affine: bool = True, eager_fp32: bool = False) -> dict:
    """RMSNorm (Zhang & Sennrich 2019) over the last dim; keeps the input and fp32 rstd per row.
    ``eager_fp32``: the chain of PyTorch ops in fp32 of the module table, each its own kernel."""
    r, w = pos_int("rows", rows), pos_int("width", width)
    n, stats = r * w, STAT_BYTES * r
    weights = w if affine else 0
    if not eager_fp32:
        return _norm_fields(n, (r, w), weights, RMS_FLOPS, Saved(act=n, fixed_bytes=stats), stats, {})
    (rd, wr), (frd, fwr) = EAGER_RMS_ACT, EAGER_RMS_FP32_BYTES
    out = _norm_fields(n, (r, w), weights, RMS_FLOPS, Saved(act=n, fixed_bytes=STAT_BYTES * n + stats), stats, {})
    out.update(attrs=attrs_of(stats_bytes=stats, eager_fp32=True, aten_kernels=pc(*EAGER_RMS_KERNELS)),
               act_read=pc(*(k * n for k in rd)), act_write=pc(*(k * n for k in wr)),
               fixed_read_bytes=pc(frd[0] * n, frd[1] * n + stats, 0),
               fixed_write_bytes=pc(fwr[0] * n + stats, fwr[1] * n, 0))
    return out


@rule("batchnorm")
def batchnorm(*, channels: int, spatial=(), affine: bool = True) -> dict:
    """BatchNorm over (batch, spatial) per channel; per sample it touches C·∏spatial elements."""
    c = pos_int("channels", channels)
    sp = tuple(pos_int(f"spatial[{i}]", d) for i, d in enumerate(spatial))
    n = c * elements(sp)
    out = _norm_fields(n, (c, *sp), 2 * c if affine else 0, NORM_FLOPS, Saved(act=n), 0,
                       {"stats_bytes_per_batch": 2 * STAT_BYTES * c})
    out["tp_split"] = "replicate"
    return out


@rule("groupnorm")
def groupnorm(*, channels: int, groups: int, spatial=(), affine: bool = True) -> dict:
    """GroupNorm (Wu & He 2018): statistics per (sample, group)."""
    c, g = pos_int("channels", channels), pos_int("groups", groups)
    if c % g:
        raise ValueError(f"groups={g} must divide channels={c}")
    sp = tuple(pos_int(f"spatial[{i}]", d) for i, d in enumerate(spatial))
    n, stats = c * elements(sp), 2 * STAT_BYTES * g
    out = _norm_fields(n, (c, *sp), 2 * c if affine else 0, NORM_FLOPS, Saved(act=n, fixed_bytes=stats), stats,
                       {"groups": g})
    out["tp_split"] = "replicate"
    return out
