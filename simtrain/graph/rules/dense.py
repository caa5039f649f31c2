"""Dense matrix products: ``linear`` (activation × weight), ``matmul`` / ``bmm`` (activation × activation).

Counting (one FMA = 2 FLOPs; FlopCounterMode's ``mm``/``addmm``/``bmm`` convention). For
Y[m, n] = X[m, k] · W[k, n] with m rows per sample:

* forward      2·m·k·n          (Y = X W)
* agrad        2·m·n·k          (dX = dY Wᵀ; zero when the input needs no gradient, e.g. the data)
* wgrad        2·k·n·m          (dW = Xᵀ dY)

The bias add (m·n adds) and the bias-gradient reduction (m·n adds) are *not* counted as FLOPs, as
in FlopCounterMode (``addmm`` = 2·m·k·n) and Megatron-LM's 24·s·h² (Narayanan et al. 2021, §5.1);
their bytes are. PyTorch keeps the input X for backward (``mm`` saves ``self`` for dW); the weight
is a parameter, not an activation, and is not counted in ``saved``.
"""

from __future__ import annotations

from simtrain.glossary import OpClass
from simtrain.graph.op import Gemm, Saved
from simtrain.graph.rules._util import attrs_of, pc, pos_int
from simtrain.graph.rules.registry import rule

__all__ = ["linear", "matmul"]


@rule("linear")
def linear(*, in_features: int, out_features: int, rows: int = 1, bias: bool = True,
           input_grad: bool = True, tied_to: str | None = None) -> dict:
    """A fully connected layer on ``rows`` rows per sample (tokens, or 1).

    ``tied_to`` names the op that owns the weight (a tied LM head): the weight is read and its
    gradient written here, but its parameters are counted once, by the owner (the bias, if any,
    stays here).
    """
    k, n, m = pos_int("in_features", in_features), pos_int("out_features", out_features), pos_int("rows", rows)
    mkn = m * k * n
    matrix, bias_n = k * n, (n if bias else 0)
    weights = matrix + bias_n
    in_el, out_el = m * k, m * n
    return dict(
        op_class=OpClass.MATMUL,
        flops=pc(2 * mkn, 2 * mkn if input_grad else 0, 2 * mkn),
        act_read=pc(in_el, out_el if input_grad else 0, out_el + in_el),
        act_write=pc(out_el, in_el if input_grad else 0, 0),
        weight_read=pc(weights, matrix if input_grad else 0, weights),
        weight_write=pc(0, 0, weights),
        param_count=bias_n if tied_to else weights,
        saved=Saved(act=in_el),
        shapes=((m, k),), out_shape=(m, n), gemm=Gemm(m=m, n=n, k=k),
        attrs=attrs_of(saved_input_elements=in_el, tied_to=tied_to, input_grad=input_grad, bias=bias),
    )


@rule("matmul", "bmm")
def matmul(*, m: int, k: int, n: int, batch: int = 1) -> dict:
    """C[batch, m, n] = A[batch, m, k] · B[batch, k, n], both operands activations (per sample).

    forward 2·batch·m·k·n; agrad dA = dC·Bᵀ and dB = Aᵀ·dC, 2·batch·m·k·n each; no weights.
    PyTorch's ``bmm`` saves both operands.
    """
    m, k, n, b = pos_int("m", m), pos_int("k", k), pos_int("n", n), pos_int("batch", batch)
    fl = 2 * b * m * k * n
    a_el, b_el, c_el = b * m * k, b * k * n, b * m * n
    return dict(
        op_class=OpClass.MATMUL,
        flops=pc(fl, 2 * fl, 0),
        act_read=pc(a_el + b_el, 2 * c_el + a_el + b_el, 0),
        act_write=pc(c_el, a_el + b_el, 0),
        saved=Saved(act=a_el + b_el),
        shapes=((b, m, k), (b, k, n)), out_shape=(b, m, n), gemm=Gemm(m=m, n=n, k=k, batch=b),
    )
