"""ATen rules for embedding / indexing, pooling, reductions, losses, copies, fills and views.

FLOP counts follow the table in :mod:`simtrain.graph.aten.vector` (one FLOP per arithmetic
operation, comparisons included). Views alias their input and cost nothing; copies move bytes and
compute nothing; fills and random generators only write (``io="write"``); allocations
(``empty*``) neither read nor write.
"""

from __future__ import annotations

from math import log2, prod

from simtrain.glossary import OpClass
from simtrain.graph.aten.registry import AtenCost, register
from simtrain.graph.capture.events import AtenEvent

__all__ = ["VIEW_OPS", "COPY_OPS", "FILL_OPS", "ALLOC_OPS", "REDUCTION_FLOPS"]


def _out(ev: AtenEvent) -> int:
    o = next((t for t in ev.outs if t is not None), None)
    return o.numel if o is not None else 0


def _self(ev: AtenEvent) -> int:
    t = ev.tensor("self") or ev.tensor("input")
    if t is None:
        ins = ev.inputs
        return ins[0].numel if ins else 0
    return t.numel


def _k(size) -> int:
    """Kernel elements from an ATen ``kernel_size`` argument (int or list)."""
    return int(prod(size)) if isinstance(size, (list, tuple)) else int(size)


# --- views, copies, fills, allocations ----------------------------------------------------------

VIEW_OPS = ("view", "_unsafe_view", "_reshape_alias", "reshape", "t", "transpose", "permute",
            "expand", "expand_as", "squeeze", "unsqueeze", "select", "slice", "split",
            "split_with_sizes", "unsafe_split", "unsafe_split_with_sizes", "unbind", "chunk",
            "narrow", "as_strided", "alias", "detach", "lift_fresh", "unfold", "diagonal",
            "view_as", "movedim", "numpy_T", "view_as_real", "view_as_complex", "_local_scalar_dense",
            "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "is_same_size",
            "_has_compatible_shallow_copy_type", "flatten", "unflatten", "_unsafe_split")
COPY_OPS = ("clone", "_to_copy", "cat", "stack", "repeat", "constant_pad_nd", "flip", "roll",
            "tril", "triu", "narrow_copy", "contiguous", "lift_fresh_copy", "_unsafe_index",
            "slice_scatter", "select_scatter", "diagonal_scatter", "masked_scatter",
            "select_backward", "slice_backward", "repeat_interleave", "nonzero", "reflection_pad2d",
            "replication_pad2d", "col2im", "im2col")
FILL_OPS = ("zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "new_zeros",
            "new_ones", "new_full", "fill", "zero", "scalar_tensor", "arange", "linspace", "logspace",
            "eye")
RANDOM_OPS = ("rand", "randn", "randint", "rand_like", "randn_like", "randint_like", "normal", "uniform",
              "randperm", "exponential", "bernoulli")
ALLOC_OPS = ("empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "resize")


@register(*VIEW_OPS)
def _view(ev: AtenEvent) -> AtenCost:
    return AtenCost(0.0, "view", OpClass.MEMORY, io="view")


@register(*COPY_OPS)
def _copy(ev: AtenEvent) -> AtenCost:
    return AtenCost(0.0, "copy", OpClass.MEMORY)


@register("copy")
def _copy_into(ev: AtenEvent) -> AtenCost:
    """``dst.copy_(src)`` reads src and writes dst (dst's old contents are not read)."""
    src = ev.tensor("src")
    return AtenCost(0.0, "copy", OpClass.MEMORY, act_read=float(src.footprint if src else 0))


@register(*FILL_OPS)
def _fill(ev: AtenEvent) -> AtenCost:
    return AtenCost(0.0, "fill", OpClass.MEMORY, io="write")


@register(*RANDOM_OPS)
def _random(ev: AtenEvent) -> AtenCost:
    # Drawing random numbers is not counted as arithmetic (CPU dropout's bernoulli_ + div_ + mul
    # then costs 2 FLOPs per element, like the fused native_dropout); the draws are a cost of their
    # own (Op attribute ``random_draws``, Efficiency.rng_draws_per_s).
    return AtenCost(0.0, "fill", OpClass.MEMORY, io="write", draws=True)


@register(*ALLOC_OPS)
def _alloc(ev: AtenEvent) -> AtenCost:
    return AtenCost(0.0, "alloc", OpClass.MEMORY, io="none")


# --- embedding, gather, scatter -----------------------------------------------------------------

@register("embedding")
def _embedding(ev: AtenEvent) -> AtenCost:
    """A gather: reads the looked-up rows (as many elements as it writes) and the indices."""
    idx = ev.tensor("indices")
    return AtenCost(0.0, "embedding", OpClass.EMBEDDING, act_read=float(_out(ev) + (idx.numel if idx else 0)))


@register("embedding_dense_backward")
def _embedding_backward(ev: AtenEvent) -> AtenCost:
    """Zero-fills the [V, D] table gradient and scatter-adds every gradient row: 1 FLOP per
    gradient element."""
    return AtenCost(float(ev.tensor("grad_output").numel), "embedding", OpClass.EMBEDDING)


@register("index_select", "gather", "index")
def _gather(ev: AtenEvent) -> AtenCost:
    idx = [t for t in ev.inputs if not t.floating]
    return AtenCost(0.0, "gather", OpClass.MEMORY, act_read=float(_out(ev) + sum(t.numel for t in idx)))


@register("scatter", "scatter_add", "index_add", "index_put", "index_copy", "scatter_reduce",
          "index_fill", "_index_put_impl")
def _scatter(ev: AtenEvent) -> AtenCost:
    """Adds (or copies) one source element per index into a copy of ``self``."""
    src = ev.tensor("src") or ev.tensor("source") or ev.tensor("values")
    adds = float(src.numel) if src is not None and ev.name in ("scatter_add", "index_add",
                                                                "scatter_reduce") else 0.0
    if ev.name in ("index_put", "_index_put_impl") and ev.arg("accumulate", False) and src is not None:
        adds = float(src.numel)
    return AtenCost(adds, "scatter", OpClass.MEMORY)


# --- pooling ------------------------------------------------------------------------------------

@register("max_pool2d_with_indices", "max_pool3d_with_indices", "max_pool2d", "max_pool1d")
def _max_pool(ev: AtenEvent) -> AtenCost:
    return AtenCost(float(_out(ev) * _k(ev.arg("kernel_size", 1))), "maxpool", OpClass.REDUCTION)


@register("max_pool2d_with_indices_backward", "max_pool3d_with_indices_backward",
          "adaptive_max_pool2d_backward", "adaptive_max_pool1d_backward")
def _max_pool_backward(ev: AtenEvent) -> AtenCost:
    """Scatter-adds each output gradient to its arg-max position: 1 FLOP per gradient element."""
    return AtenCost(float(ev.tensor("grad_output").numel), "maxpool", OpClass.REDUCTION)


@register("avg_pool2d", "avg_pool3d", "avg_pool1d")
def _avg_pool(ev: AtenEvent) -> AtenCost:
    n = _out(ev)
    return AtenCost(float(n * _k(ev.arg("kernel_size", 1)) + n), "avgpool", OpClass.REDUCTION)


@register("avg_pool2d_backward", "avg_pool3d_backward")
def _avg_pool_backward(ev: AtenEvent) -> AtenCost:
    g = ev.tensor("grad_output").numel
    return AtenCost(float(g * _k(ev.arg("kernel_size", 1)) + g), "avgpool", OpClass.REDUCTION)


@register("_adaptive_avg_pool2d", "_adaptive_avg_pool3d", "adaptive_max_pool2d", "adaptive_max_pool1d")
def _adaptive_pool(ev: AtenEvent) -> AtenCost:
    return AtenCost(float(_self(ev) + _out(ev)), "avgpool", OpClass.REDUCTION)


@register("_adaptive_avg_pool2d_backward", "_adaptive_avg_pool3d_backward")
def _adaptive_pool_backward(ev: AtenEvent) -> AtenCost:
    return AtenCost(float(_out(ev)), "avgpool", OpClass.REDUCTION)


# --- reductions ---------------------------------------------------------------------------------

REDUCTION_FLOPS: dict[str, float] = {
    **dict.fromkeys(("sum", "nansum", "amax", "amin", "max", "min", "argmax", "argmin", "any", "all",
                     "prod", "cumsum", "cumprod", "count_nonzero", "aminmax", "kthvalue", "median",
                     "logcumsumexp", "_cummax_helper", "_cummin_helper", "sum_to_size"), 1.0),
    **dict.fromkeys(("var", "std", "var_mean", "std_mean"), 3.0),
    **dict.fromkeys(("norm", "linalg_vector_norm"), 2.0),
    "logsumexp": 4.0,
}


def _reduction(name: str, per_input: float) -> None:
    def rule(ev: AtenEvent) -> AtenCost:
        return AtenCost(per_input * _self(ev), "reduction", OpClass.REDUCTION)
    register(name)(rule)


for _n, _f in REDUCTION_FLOPS.items():
    _reduction(_n, _f)


@register("mean")
def _mean(ev: AtenEvent) -> AtenCost:
    return AtenCost(float(_self(ev) + _out(ev)), "reduction", OpClass.REDUCTION)


@register("sort", "argsort", "topk")
def _sort(ev: AtenEvent) -> AtenCost:
    """Comparison sorts: n·log2(d) compares for a sort over a dimension of d elements, n·log2(k)
    for a top-k (heap selection)."""
    t = ev.tensor("self")
    dim = int(ev.arg("dim", -1))
    d = t.shape[dim] if t.shape else 1
    k = int(ev.arg("k", d)) if ev.name == "topk" else d
    return AtenCost(t.numel * max(1.0, log2(max(k, 2))), "sort", OpClass.REDUCTION)


# --- losses -------------------------------------------------------------------------------------

@register("nll_loss_forward", "nll_loss2d_forward")
def _nll(ev: AtenEvent) -> AtenCost:
    """Gathers one log-probability per row (reads rows + targets, not the whole [N, C] input);
    ``total_weight`` (output 1) is a scalar that does not scale with the batch."""
    target = ev.tensor("target")
    rows = target.numel if target is not None else 1
    return AtenCost(float(rows), "cross_entropy", OpClass.REDUCTION, act_read=float(2 * rows),
                    mb_stats=(1,))


@register("nll_loss_backward", "nll_loss2d_backward")
def _nll_backward(ev: AtenEvent) -> AtenCost:
    """Zero-fills the [N, C] gradient and writes −w/total into one element per row."""
    target = ev.tensor("target")
    rows = target.numel if target is not None else 1
    return AtenCost(float(rows), "cross_entropy", OpClass.REDUCTION, act_read=float(rows))


@register("mse_loss", "mse_loss_backward", "smooth_l1_loss", "smooth_l1_loss_backward",
          "huber_loss", "huber_loss_backward", "l1_loss")
def _pointwise_loss(ev: AtenEvent) -> AtenCost:
    """(x − y)² summed: −, square, + (3 per element); backwards 3 (−, ·2/N, ·g)."""
    return AtenCost(3.0 * _self(ev), "loss", OpClass.ELEMENTWISE)


@register("binary_cross_entropy_with_logits", "binary_cross_entropy", "binary_cross_entropy_backward")
def _bce(ev: AtenEvent) -> AtenCost:
    """max(x, 0) − x·t + log(1 + e^−|x|): 9 operations per element."""
    return AtenCost(9.0 * _self(ev), "loss", OpClass.ELEMENTWISE)
