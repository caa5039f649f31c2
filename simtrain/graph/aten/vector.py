"""ATen rules for vector work: elementwise maths, norms, softmax, dropout, embedding, pooling,
reductions, losses, copies, fills and views (see :mod:`simtrain.graph.aten` for the registry).

FlopCounterMode counts none of these (it only knows matrix, convolution and attention kernels);
simtrain counts them from first principles, one FLOP per arithmetic operation of the defining
formula, a transcendental (exp, log, erf, tanh, rsqrt) counted as 1. Per element of the output
(unless said otherwise), n = elements of the normalised input:

=============================  ====  ==============================================================
op                             FLOPs derivation
=============================  ====  ==============================================================
relu, threshold_backward       1     compare-select
gelu (erf)                     5     x/√2, erf, +1, ·x, ·½
gelu (tanh)                    9     x², x³, ·c, +x, ·√(2/π), tanh, +1, ·x, ·½
gelu_backward (erf)            11    Φ: x/√2, erf, +1, ·½ (4); φ: x², ·(−½), exp, ·1/√(2π) (4);
                                     x·φ, Φ + xφ, ·g (3)
gelu_backward (tanh)           17    u and t again (6), 1−t² (2), du/dx (3), combine (5), ·g
silu                           5     σ = 1/(1+e^−x): neg, exp, +1, reciprocal (4); ·x
silu_backward                  9     σ (4), 1−σ, x(1−σ), +1, σ·(…), ·g
sigmoid / sigmoid_backward     4 / 3 σ (4) / g·y·(1−y): 1−y, ·y, ·g
tanh / tanh_backward           1 / 3 tanh / g·(1−y²): y², 1−, ·g
softmax / log_softmax          5     max, −max, exp, Σ, ÷ (log_softmax: − log Σ instead of ÷)
softmax backward               4     Σ g·y (2), g − Σ, ·y
log_softmax backward           4     exp(y), ·Σg, g −, Σ g
layer/group/batch norm         8·n   mean (1), variance (3: −μ, square, +), normalise (2: −μ, ·rstd),
                                     affine (2: ·γ, +β); 6·n without affine
  …backward, grad input        10·n  x̂ (2), g·γ (1), Σ g·γ (1), Σ g·γ·x̂ (2),
                                     rstd·(gγ − mean − x̂·mean) (4); 9·n without γ
  …backward, grad γ / grad β   2·n / 1·n   Σ g·x̂ / Σ g
rms norm / backward            4·n   Σx² (2), ·rstd, ·γ / agrad 7·n: x̂, g·γ, Σ gγx̂ (2), rstd(gγ − x̂·m) (3);
                                     wgrad 2·n
dropout / backward             2 / 2 ·mask, ·1/(1−p) (drawing the mask is not arithmetic)
add, sub, mul, div, …          1     one operation per output element
sum, mean, max, argmax         1/in  one add / compare per input element (mean: + one ÷ per output)
var, std                       3/in  −μ, square, +
max / avg pool                 k     k = kernel elements per output (avg: + one ÷)
adaptive avg pool              1/in  one add per input element, one ÷ per output
embedding / dense backward     0 / 1 gather / scatter-add per gradient element
nll_loss / backward            1/row gather and add one log-probability per row
=============================  ====  ==============================================================

Views (``view``, ``t``, ``transpose``, ``permute``, ``expand``, ``select``, ``slice``, ``split``,
``detach``, …) alias their input: zero FLOPs and zero bytes; their cost, if any, shows up in the
first op that reads the strided result. Copies (``clone``, ``copy_``, ``cat``, ``_to_copy``) move
bytes but compute nothing; fills and random generators only write.
"""

from __future__ import annotations

from simtrain.glossary import OpClass
from simtrain.graph.aten.registry import AtenCost, Part, register
from simtrain.graph.capture.events import AtenEvent

__all__ = ["ELEMENTWISE_FLOPS"]


def _out_numel(ev: AtenEvent) -> int:
    o = next((t for t in ev.outs if t is not None), None)
    return o.numel if o is not None else 0


def _first_in(ev: AtenEvent) -> int:
    ins = ev.inputs
    return ins[0].numel if ins else 0


# --- elementwise --------------------------------------------------------------------------------

ELEMENTWISE_FLOPS: dict[str, float] = {
    **dict.fromkeys(("add", "sub", "rsub", "mul", "div", "remainder", "fmod", "pow", "maximum",
                     "minimum", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or",
                     "logical_xor", "logical_not", "bitwise_and", "bitwise_or", "bitwise_xor",
                     "bitwise_not", "where", "masked_fill", "clamp_min", "clamp_max", "copysign",
                     "atan2", "sign", "sgn", "abs", "neg", "reciprocal", "sqrt", "rsqrt", "exp",
                     "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "asin",
                     "acos", "atan", "sinh", "cosh", "tanh", "erf", "erfc", "erfinv", "floor",
                     "ceil", "round", "trunc", "frac", "relu", "threshold", "threshold_backward",
                     "nan_to_num", "isnan", "isinf", "square"), 1.0),
    **dict.fromkeys(("clamp", "hardtanh", "hardtanh_backward", "addcmul", "addcdiv", "lerp",
                     "leaky_relu", "leaky_relu_backward", "xlogy", "hardsigmoid_backward"), 2.0),
    "elu": 3.0, "elu_backward": 3.0, "hardsigmoid": 3.0, "hypot": 3.0, "sigmoid": 4.0,
    "sigmoid_backward": 3.0, "tanh_backward": 3.0, "silu": 5.0, "silu_backward": 9.0,
    "hardswish": 5.0, "hardswish_backward": 4.0, "softplus": 4.0, "softplus_backward": 4.0,
    "mish": 7.0, "mish_backward": 12.0,
}

_KIND_OF = {"relu": "relu", "threshold_backward": "relu", "silu": "silu", "silu_backward": "silu",
            "sigmoid": "sigmoid", "sigmoid_backward": "sigmoid", "tanh": "tanh",
            "tanh_backward": "tanh", "add": "add", "sub": "add", "mul": "mul", "div": "mul"}


def _elementwise(name: str, per_element: float) -> None:
    def rule(ev: AtenEvent) -> AtenCost:
        return AtenCost(per_element * _out_numel(ev), _KIND_OF.get(name, name), OpClass.ELEMENTWISE)
    register(name)(rule)


for _n, _k in ELEMENTWISE_FLOPS.items():
    _elementwise(_n, _k)


@register("gelu")
def _gelu(ev: AtenEvent) -> AtenCost:
    k = 9.0 if ev.arg("approximate", "none") == "tanh" else 5.0
    return AtenCost(k * _out_numel(ev), "gelu", OpClass.ELEMENTWISE)


@register("gelu_backward")
def _gelu_backward(ev: AtenEvent) -> AtenCost:
    k = 17.0 if ev.arg("approximate", "none") == "tanh" else 11.0
    return AtenCost(k * _out_numel(ev), "gelu", OpClass.ELEMENTWISE)


# --- softmax and dropout --------------------------------------------------------------------------

@register("_softmax", "_log_softmax", "_safe_softmax")
def _softmax(ev: AtenEvent) -> AtenCost:
    return AtenCost(5.0 * _out_numel(ev), "softmax", OpClass.ELEMENTWISE)


@register("_softmax_backward_data", "_log_softmax_backward_data")
def _softmax_backward(ev: AtenEvent) -> AtenCost:
    return AtenCost(4.0 * _out_numel(ev), "softmax", OpClass.ELEMENTWISE)


@register("native_dropout")
def _dropout(ev: AtenEvent) -> AtenCost:
    # CUDA's fused kernel: the mask's draws happen inside it (output 1 is the mask, one per element)
    return AtenCost(2.0 * _out_numel(ev), "dropout", OpClass.ELEMENTWISE, draws=True)


@register("native_dropout_backward")
def _dropout_backward(ev: AtenEvent) -> AtenCost:
    return AtenCost(2.0 * _out_numel(ev), "dropout", OpClass.ELEMENTWISE)


# --- normalisation ------------------------------------------------------------------------------

def _norm_forward(ev: AtenEvent, kind: str, stats: tuple[int, ...] = (), mb: tuple[int, ...] = (),
                  per_affine: float = 8.0, per_plain: float = 6.0) -> AtenCost:
    n = ev.tensor("input").numel
    k = per_affine if ev.tensor("weight") is not None else per_plain
    return AtenCost(k * n, kind, OpClass.NORM, stats=stats, mb_stats=mb)


def _norm_backward(ev: AtenEvent, kind: str, stat_args: tuple[str, ...], agrad: float = 10.0,
                   agrad_plain: float = 9.0, wgrad: float = 2.0) -> AtenCost:
    n = ev.tensor("input").numel
    has_w = ev.tensor("weight") is not None
    mask = tuple(ev.arg("output_mask", (True, True, True)))
    parts = []
    if mask[0]:
        parts.append(Part(0, (agrad if has_w else agrad_plain) * n,
                          ("grad_out", "grad_output", "input", "weight") + stat_args))
    if len(mask) > 1 and mask[1]:
        parts.append(Part(1, wgrad * n, ("grad_out", "grad_output", "input") + stat_args))
    if len(mask) > 2 and mask[2]:
        parts.append(Part(2, 1.0 * n, ("grad_out", "grad_output")))
    return AtenCost(sum(p.flops for p in parts), kind, OpClass.NORM, parts=tuple(parts))


@register("native_layer_norm")
def _layer_norm(ev: AtenEvent) -> AtenCost:
    return _norm_forward(ev, "layernorm", stats=(1, 2))


@register("native_layer_norm_backward")
def _layer_norm_backward(ev: AtenEvent) -> AtenCost:
    return _norm_backward(ev, "layernorm", ("mean", "rstd"))


@register("native_group_norm")
def _group_norm(ev: AtenEvent) -> AtenCost:
    return _norm_forward(ev, "groupnorm", stats=(1, 2))


@register("native_group_norm_backward")
def _group_norm_backward(ev: AtenEvent) -> AtenCost:
    return _norm_backward(ev, "groupnorm", ("mean", "rstd"))


@register("native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_functional")
def _batch_norm(ev: AtenEvent) -> AtenCost:
    """Training normalises with batch statistics (8·n); evaluation applies the running statistics
    as one fused scale-and-shift (2·n). The saved mean / inverse std are per channel: they do not
    scale with the batch."""
    if not ev.arg("training", True):
        return AtenCost(2.0 * ev.tensor("input").numel, "batchnorm", OpClass.NORM)
    return _norm_forward(ev, "batchnorm", mb=(1, 2, 3, 4))


@register("_native_batch_norm_legit_no_training")
def _batch_norm_eval(ev: AtenEvent) -> AtenCost:
    return AtenCost(2.0 * ev.tensor("input").numel, "batchnorm", OpClass.NORM)


@register("native_batch_norm_backward")
def _batch_norm_backward(ev: AtenEvent) -> AtenCost:
    if not ev.arg("train", True):
        return _norm_backward(ev, "batchnorm", ("running_var",), agrad=2.0, agrad_plain=1.0)
    return _norm_backward(ev, "batchnorm", ("save_mean", "save_invstd"))


@register("_fused_rms_norm")
def _rms_norm(ev: AtenEvent) -> AtenCost:
    return _norm_forward(ev, "rmsnorm", stats=(1,), per_affine=4.0, per_plain=3.0)


@register("_fused_rms_norm_backward")
def _rms_norm_backward(ev: AtenEvent) -> AtenCost:
    return _norm_backward(ev, "rmsnorm", ("rstd",), agrad=7.0, agrad_plain=6.0)
