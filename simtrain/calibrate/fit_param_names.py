"""The names of a compute fit's parameters and which bench rows each one moves.

A parameter is a curve field (``matmul.peak_fraction``, ``conv@bw.half_flops``), an op kind's curve
field (``kind:maxpool.half_flops``), a class's issue time (``launch:conv``, ``launch:conv@bw``), an
optimizer's host overhead (``optim:adamw/fused``, ``optim_step:adamw/fused``) or a global
(``launch_overhead_s``). :func:`jacobian_sparsity` gives ``least_squares`` which residuals each can
change (the fit below).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from simtrain.calibrate.records import Row
from simtrain.cost.compute import (
    DEPTHWISE_CONV_KIND,
    GROUPED_CONV_KIND,
)
from simtrain.glossary import OpClass

__all__ = ["BW_SUFFIX", "OPTIM_PREFIX", "OPTIM_STEP_PREFIX", "LAUNCH_PREFIX", "KIND_PREFIX", "KIND_CLASSES", "KIND_ALIASES", "row_kind", "jacobian_sparsity"]


BW_SUFFIX = "@bw"
"""Suffix of a class whose backward rows get their own curve (``Efficiency.backward_compute``)."""
OPTIM_PREFIX = "optim:"
"""Prefix of an optimizer's per-tensor host overhead, e.g. ``optim:adamw/for-loop``
(``Efficiency.optimizer_tensor_overhead_s``): one parameter per optimizer and implementation the bench
timed, identified by its rows over 8, 32 and 256 tensors, so it is left out of the prior (its base
value is "not costed", which a prior in log space would pull it towards)."""
OPTIM_STEP_PREFIX = "optim_step:"
"""Prefix of an optimizer's per-step host overhead (``Efficiency.optimizer_step_overhead_s``), fitted
with its per-tensor one where the key's rows span :data:`simtrain.calibrate.fit_compute._STEP_TENSOR_COUNTS` tensor counts or more
(fewer cannot tell a cost per step from one per tensor)."""
LAUNCH_PREFIX = "launch:"
"""Prefix of an op class's own issue time (``Efficiency.class_launch_overhead_s``), e.g.
``launch:conv``: fitted where the host runs ahead of the device (``Efficiency.launch_async``), whose
small rows each sit on their class's issue time."""
KIND_PREFIX = "kind:"
"""Prefix of an op kind's own curve (``Efficiency.kind_compute``), e.g. ``kind:maxpool@bw.half_flops``."""
KIND_CLASSES = {"maxpool": OpClass.REDUCTION, "layernorm": OpClass.NORM, "rmsnorm": OpClass.NORM,
                 "batchnorm": OpClass.NORM, GROUPED_CONV_KIND: OpClass.CONV, DEPTHWISE_CONV_KIND: OpClass.CONV}
"""Benches named after an op kind whose rows fit that kind's own curve, with the class it falls back to.
On a CPU the three normalisations are different loops (layer norm: one fused Welford pass per row;
RMS norm: a composite of pow, mean, rsqrt and mul kernels below torch 2.x's fused path; batch norm:
statistics over N·H·W per channel of an NCHW tensor, a strided reduction), 2–3× apart per byte.
Grouped and depthwise convolutions (conv2d rows with groups > 1) run other kernels than dense ones
and than each other (cost/compute.py ``curve_kind``): a curve each, forward and backward."""
KIND_ALIASES = {"maxpool": ("maxpool2d",)}
"""Other kind names of the same kernel: a built model's rule (graph/rules/conv.py ``maxpool2d``)."""


def row_kind(row: Row) -> str:
    """The curve key a row speaks for: its bench (an op kind), or for a conv2d row with groups > 1
    :data:`DEPTHWISE_CONV_KIND` (one output channel per group) or :data:`GROUPED_CONV_KIND`, as
    ``cost.compute.curve_kind`` prices the graph's ops."""
    groups = int(row.params.get("groups", 1))
    if row.bench == "conv2d" and groups > 1:
        return DEPTHWISE_CONV_KIND if int(row.params["k"]) == groups else GROUPED_CONV_KIND
    return row.bench


def _moves(name: str, row: Row) -> bool:
    """Whether parameter ``name`` can change the prediction of ``row`` (a superset is safe: it only
    groups fewer columns of the finite-difference Jacobian)."""
    if name.startswith((OPTIM_PREFIX, OPTIM_STEP_PREFIX)):
        return row.phase == "optim"
    if name.startswith(LAUNCH_PREFIX):  # a class's forward figure also issues its backward where it has none
        key = name.removeprefix(LAUNCH_PREFIX)
        return (row.phase != "optim" and row.op_class is not None and row.op_class.value == key.removesuffix(BW_SUFFIX)
                and (row.phase == "bw" or not key.endswith(BW_SUFFIX)))
    if "." not in name:  # the globals, the cache tier, the strided-dX exponent: every row
        return True
    key = name.split(".")[0]
    if key.startswith(KIND_PREFIX):
        kind = key.removeprefix(KIND_PREFIX).removesuffix(BW_SUFFIX)
        return row_kind(row) in (kind, *KIND_ALIASES.get(kind, ()))
    return row.op_class is not None and row.op_class.value == key.removesuffix(BW_SUFFIX)


def jacobian_sparsity(rows: Sequence[Row], names: Sequence[str]) -> np.ndarray:
    """Which residual each parameter can move: the rows of its own class, kind or optimizer (the
    globals: all), then the prior's diagonal. ``least_squares`` then perturbs parameters that share
    no row together, so a CUDA set's finite-difference Jacobian (≈ 110 parameters, most of them a
    class's or a kind's) costs a few dozen evaluations instead of one per parameter."""
    data = np.array([[_moves(n, r) for n in names] for r in rows], dtype=bool).reshape(len(rows), len(names))
    return np.vstack([data, np.eye(len(names), dtype=bool)]).astype(int)
