"""Per-op tables and whole-model totals of a :class:`~simtrain.graph.model.Model` (per sample).

``summary_frame(model)`` is what ``model.summary()`` returns: one row per op (name, kind, block,
shapes, parameters, FLOPs by phase, ``model_flops`` (fw + bw of a matrix op, else 0) and
``vector_flops`` (fw + bw of any other op, else 0), activation bytes written forward and bytes saved for backward,
both at 16-bit activations), then a ``TOTAL`` row and, when an importer met operators without a
rule, an ``UNMODELLED`` row that lists them (they are never silently dropped).

The model-level helpers make the accounting choices explicit:

* :func:`model_flops` — FLOPs per sample by phase; ``attention="full"`` (PaLM / Megatron, the
  default) or ``"causal"``; ``matmul_only=True`` keeps only the matrix work (linear, conv,
  attention, MoE), the quantity of Megatron's 24·s·h² + 4·s²·h and PaLM's 6N + 12·L·H·Q·T;
* :func:`active_param_count` — parameters touched per token (MoE: top_k of the experts);
* :func:`saved_bytes` — bytes saved for backward per sample, with or without the norms' fp32
  statistics (Korthikanti et al. 2022 leave them out).
"""

from __future__ import annotations

import pandas as pd

from simtrain.glossary import OpClass
from simtrain.graph.op import Op, PhaseCounts
from simtrain.graph.rules.attention import attention_flops
from simtrain.graph.view import ModelView

__all__ = ["summary_frame", "model_flops", "active_param_count", "saved_bytes", "palm_flops_per_token",
           "MATRIX_CLASSES", "SUMMARY_ACT_BYTES"]

MATRIX_CLASSES = frozenset({OpClass.MATMUL, OpClass.CONV, OpClass.ATTENTION})
SUMMARY_ACT_BYTES = 2
"""The summary's activation bytes are at 16 bits (bf16 / fp16 activations)."""


def model_flops(model: ModelView, *, attention: str = "full", matmul_only: bool = False) -> PhaseCounts:
    """FLOPs per sample by phase (one FMA = 2) under the chosen attention convention."""
    total = PhaseCounts()
    for op in model.ops:
        if matmul_only and op.op_class not in MATRIX_CLASSES:
            continue
        total = total + (attention_flops(op, attention) if op.attention is not None else op.flops)
    return total


def active_param_count(model: ModelView) -> int:
    """Parameters used per token: an MoE expert op contributes top_k / experts of its parameters."""
    active = 0.0
    for op in model.ops:
        if op.moe is not None and op.kind == "moe_experts":
            active += op.param_count * op.moe.top_k / op.moe.experts
        else:
            active += op.param_count
    return round(active)


def saved_bytes(model: ModelView, act_bytes: float = SUMMARY_ACT_BYTES, *, norm_stats: bool = True) -> float:
    """Bytes saved for backward per sample; ``norm_stats=False`` drops the fp32 mean/rstd of norms."""
    total = 0.0
    for op in model.ops:
        total += op.saved.bytes(act_bytes)
        if not norm_stats:
            total -= float(op.attr("stats_bytes", 0.0) or 0.0)
    return total


def palm_flops_per_token(model: ModelView) -> float | None:
    """Training FLOPs per token by PaLM's closed form (Chowdhery et al. 2022, App. B):
    6·N + 12·L·H·Q·T, N the parameters used per token (:func:`active_param_count`), L layers, H heads,
    Q head dim, T tokens per sample. None for models without attention layers."""
    meta = model.meta
    if "layers" not in meta or "heads" not in meta:
        return None
    tokens = meta.get("tokens") or model.seq_len
    n = active_param_count(model)
    return 6.0 * n + 12.0 * meta["layers"] * meta["heads"] * meta["head_dim"] * tokens


def _shape_text(shapes: tuple[tuple[int, ...], ...]) -> str:
    return " ".join("×".join(str(d) for d in s) for s in shapes)


def _row(op: Op) -> dict:
    return {
        "name": op.name, "kind": op.kind, "block": op.block, "class": str(op.op_class), "tp_split": op.tp_split,
        "in_shapes": _shape_text(op.shapes), "out_shape": _shape_text((op.out_shape,)) if op.out_shape else "",
        "params": op.param_count, "fw_flops": op.flops.fw, "agrad_flops": op.flops.agrad,
        "wgrad_flops": op.flops.wgrad,
        # model FLOPs count the matrix ops only (PaLM, Megatron-LM, FlopCounterMode); the rest apart
        "model_flops": op.flops.total if op.op_class in MATRIX_CLASSES else 0.0,
        "vector_flops": 0.0 if op.op_class in MATRIX_CLASSES else op.flops.total,
        "act_write_fw_bytes": op.act_write.fw * SUMMARY_ACT_BYTES + op.fixed_write_bytes.fw,
        "saved_bytes": op.saved.bytes(SUMMARY_ACT_BYTES),
    }


_NUMERIC = ("params", "fw_flops", "agrad_flops", "wgrad_flops", "model_flops", "vector_flops", "act_write_fw_bytes",
            "saved_bytes")


def summary_frame(model: ModelView) -> pd.DataFrame:
    """Per-op table of ``model`` (per sample, 16-bit activations) with a TOTAL row and, if any, an
    UNMODELLED row. ``df.attrs`` holds the model name, seq_len and the unmodelled list."""
    rows = [_row(op) for op in model.ops]
    total = {k: sum(r[k] for r in rows) for k in _NUMERIC}
    total["params"] = model.param_count  # tied weights counted once, as the ops already do
    rows.append({"name": "TOTAL", "kind": "", "block": "", "class": "", "tp_split": "", "in_shapes": "",
                 "out_shape": "", **total})
    if model.unmodelled:
        listed = ", ".join(f"{u.name}×{u.count}" for u in model.unmodelled)
        count = sum(u.count for u in model.unmodelled)
        rows.append({"name": "UNMODELLED", "kind": f"{count} ops without a rule: {listed}", "block": "",
                     "class": "", "tp_split": "", "in_shapes": "", "out_shape": "",
                     **{k: float("nan") for k in _NUMERIC}})
    df = pd.DataFrame(rows)
    df.attrs.update(model=model.name, seq_len=model.seq_len, unmodelled=list(model.unmodelled),
                    act_bytes=SUMMARY_ACT_BYTES)
    return df
