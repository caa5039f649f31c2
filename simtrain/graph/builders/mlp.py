"""Multi-layer perceptrons: blocks ``layers.{i}`` (linear, activation, optional dropout; the last
layer has no activation) and ``head`` (cross-entropy). The first linear needs no input gradient
(its input is the data). Parameters: Σ (w_i·w_{i+1} + w_{i+1}) with biases.
"""

from __future__ import annotations

from simtrain.graph.builders.common import IN, PartBuilder, assemble
from simtrain.graph.op import ModelParts
from simtrain.graph.spec import ModelSpec

__all__ = ["build_mlp"]


def build_mlp(spec: ModelSpec, rebuild=None) -> ModelParts:
    """The op graph of an MLP classifier (per sample: one row)."""
    m = spec.mlp
    widths = m.widths
    parts = []
    for i, (k, n) in enumerate(zip(widths, widths[1:], strict=False)):
        pb = PartBuilder(f"layers.{i}")
        pb.add("linear", "fc", inputs=(IN,), rows=1, in_features=k, out_features=n, bias=m.bias,
               input_grad=i > 0, input_saved_by=f"layers.{i - 1}/act" if (i and m.activation in ("relu", "tanh", "sigmoid")
                                                                               and not m.dropout) else None)
        if i < len(widths) - 2:
            pb.add(m.activation, "act", shape=(n,), tp_split="replicate")
            if m.dropout:
                pb.add("dropout", "drop", shape=(n,), p=m.dropout)
        parts.append(pb.build())
    head = PartBuilder("head")
    head.add("cross_entropy", "loss", inputs=(IN,), rows=1, classes=widths[-1])
    parts.append(head.build())
    meta = {"family": spec.family, "published_params": spec.published_params}
    return assemble(spec.name, parts, arch=spec, seq_len=None, meta=meta)
