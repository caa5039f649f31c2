"""Element-wise ops: activations, ``softmax``, ``dropout``, residual ``add`` and ``concat``.

FLOPs are the natural count: one per arithmetic operation of the reference formula per element,
a transcendental (exp, erf, tanh) counting as one. Per (output) element:

| kind      | forward                                  | agrad                                         | saved (PyTorch)          |
|-----------|------------------------------------------|-----------------------------------------------|--------------------------|
| relu      | 1 (max)                                  | 1 (select)                                    | its output               |
| relu2     | 2: max, ×itself                          | 2: 2·relu(x), ×dY                             | its input                |
| gelu      | 5: x/√2, erf, +1, ×x, ×½                 | 11: Φ again 4, x², ×−½, exp, ×1/√(2π), ×x, +, ×dY | its input             |
| gelu_tanh | 9: x², ×x, ×c, +x, ×k, tanh, +1, ×x, ×½  | 17: u, t again 6, 1−t² 2, du/dx 3, combine 5, ×dY | its input             |
| silu      | 5: sigmoid 4, ×x                         | 9: sigmoid 4, dY·s·(1 + x(1−s)) 5             | its input                |
| sigmoid   | 4: −x, exp, +1, 1/·                      | 3: dY·y·(1−y)                                 | its output               |
| tanh      | 1                                        | 3: dY·(1−y²)                                  | its output               |
| swiglu    | 6: silu(g) 5, ×u                         | 11: dU = dY·silu(g) 1, dG = dY·u 1 + silu bw 9 | g, silu(g), u (eager); g, u (fused) |
| softmax   | 5: max, −max, exp, Σ, ÷                  | 4: dY·y, Σ, −, ×y                             | its output               |
| dropout   | 2: ×mask, ×1/(1−p)                       | 2                                             | 1-byte mask              |
| add       | 1                                        | 1: the two incoming gradients of the forked input are summed (autograd accumulation, attributed here) | nothing |
| concat    | 0 (a copy)                               | 0 (slices are views)                          | nothing                  |

Element-wise ops run on the split shard under TP when they sit between a column- and a row-split
matmul (activations: ``tp_split="column"``); dropout and add sit on the residual stream
(``"sequence"``). Builders override where needed.
"""

from __future__ import annotations

from simtrain.glossary import OpClass
from simtrain.graph.op import Saved
from simtrain.graph.rules._util import as_shape, attrs_of, elements, nonneg_int, pc, prob
from simtrain.graph.rules.registry import rule

__all__ = ["UNARY_FLOPS", "unary", "swiglu", "softmax", "dropout", "add", "concat"]

#: (forward, agrad) FLOPs per element and what PyTorch saves ("input" or "output").
UNARY_FLOPS: dict[str, tuple[int, int, str]] = {
    "relu": (1, 1, "output"),
    "relu2": (2, 2, "input"),
    "gelu": (5, 11, "input"),
    "gelu_tanh": (9, 17, "input"),
    "silu": (5, 9, "input"),
    "sigmoid": (4, 3, "output"),
    "tanh": (1, 3, "output"),
}


def _unary_fields(kind: str, shape) -> dict:
    shp = as_shape("shape", shape)
    n = elements(shp)
    fw, ag, keeps = UNARY_FLOPS[kind]
    attrs = attrs_of(saved_input_elements=n) if keeps == "input" else attrs_of(saves="output")
    return dict(op_class=OpClass.ELEMENTWISE, flops=pc(fw * n, ag * n), act_read=pc(n, 2 * n),
                act_write=pc(n, n), saved=Saved(act=n), shapes=(shp,), out_shape=shp, tp_split="column",
                attrs=attrs)


def unary(kind: str):
    def fn(*, shape) -> dict:
        return _unary_fields(kind, shape)
    fn.__doc__ = f"``{kind}`` on a per-sample tensor of ``shape`` (counts in the module table)."
    fn.__name__ = kind
    return rule(kind)(fn)


relu, relu2, gelu, gelu_tanh, silu, sigmoid, tanh = (unary(k) for k in UNARY_FLOPS)


@rule("swiglu")
def swiglu(*, shape, fused: bool = False) -> dict:
    """SwiGLU (Shazeer 2020): out = silu(gate) ⊙ up on a per-sample output ``shape`` (..., f); the
    input holds gate and up, (..., 2f). Eager PyTorch keeps gate (silu), silu(gate) and up (mul):
    3f per row; a fused kernel keeps only its input, 2f."""
    shp = as_shape("shape", shape)
    n = elements(shp)
    in_shape = (*shp[:-1], 2 * shp[-1])
    kept = 2 * n if fused else 3 * n
    return dict(op_class=OpClass.ELEMENTWISE, flops=pc(6 * n, 11 * n), act_read=pc(2 * n, n + kept),
                act_write=pc(n, 2 * n), saved=Saved(act=kept), shapes=(in_shape,), out_shape=shp,
                tp_split="column", attrs=attrs_of(fused=fused))


@rule("softmax")
def softmax(*, shape) -> dict:
    """Softmax over the last dim; keeps its output."""
    shp = as_shape("shape", shape)
    n = elements(shp)
    return dict(op_class=OpClass.REDUCTION, flops=pc(5 * n, 4 * n), act_read=pc(n, 2 * n), act_write=pc(n, n),
                saved=Saved(act=n), shapes=(shp,), out_shape=shp, tp_split="column",
                attrs=attrs_of(saves="output"))


@rule("dropout")
def dropout(*, shape, p: float) -> dict:
    """Dropout with probability ``p`` > 0: keeps a bool mask (1 byte per element; ``native_dropout``)."""
    prob_p = prob("p", p)
    if prob_p == 0.0:
        raise ValueError("dropout with p=0 is the identity: leave the op out")
    shp = as_shape("shape", shape)
    n = elements(shp)
    return dict(op_class=OpClass.ELEMENTWISE, flops=pc(2 * n, 2 * n), act_read=pc(n, n), act_write=pc(n, n),
                fixed_write_bytes=pc(n, 0), fixed_read_bytes=pc(0, n), saved=Saved(mask=n),
                shapes=(shp,), out_shape=shp, tp_split="sequence", attrs=attrs_of(p=prob_p, random_draws=n))


@rule("add")
def add(*, shape, learned: bool = False) -> dict:
    """Residual add of two per-sample tensors of ``shape``. ``learned=True``: the second operand is a
    parameter of that shape broadcast over the batch (ViT position embedding): it has ``∏shape``
    parameters and its gradient is the batch sum of dY (one add per element per sample)."""
    shp = as_shape("shape", shape)
    n = elements(shp)
    if learned:
        return dict(op_class=OpClass.ELEMENTWISE, flops=pc(n, 0, n), act_read=pc(n, 0, n), act_write=pc(n),
                    weight_read=pc(n, 0, n), weight_write=pc(0, 0, n), param_count=n, saved=Saved(),
                    shapes=(shp,), out_shape=shp, tp_split="sequence", attrs=attrs_of(learned=True))
    return dict(op_class=OpClass.ELEMENTWISE, flops=pc(n, n), act_read=pc(2 * n, 2 * n), act_write=pc(n, n),
                saved=Saved(), shapes=(shp, shp), out_shape=shp, tp_split="sequence")


@rule("concat")
def concat(*, rows: tuple[int, ...], width: int, learned_rows: int = 0) -> dict:
    """Concatenate per-sample tensors of ``rows[i]`` × ``width`` along the rows (a copy). The first
    ``learned_rows`` rows are a parameter broadcast over the batch (ViT's class token)."""
    parts = tuple(nonneg_int(f"rows[{i}]", r) for i, r in enumerate(rows))
    w, lr = as_shape("width", width)[0], nonneg_int("learned_rows", learned_rows)
    total = (sum(parts) + lr) * w
    learned = lr * w
    return dict(op_class=OpClass.MEMORY, flops=pc(0, 0, learned), act_read=pc(total - learned, 0, learned),
                act_write=pc(total), weight_read=pc(learned, 0, learned), weight_write=pc(0, 0, learned),
                param_count=learned, saved=Saved(), shapes=tuple((r, w) for r in parts),
                out_shape=(sum(parts) + lr, w), tp_split="sequence", attrs=attrs_of(learned_rows=lr or None))
