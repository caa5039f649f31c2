"""Model builders: a :class:`~simtrain.graph.spec.ModelSpec` → :class:`~simtrain.graph.op.ModelParts`.

:func:`build_parts` dispatches on the family (and the CNN arch);
:func:`simtrain.graph.model.build_model` wraps the parts in a Model and caches by spec.
"""

from __future__ import annotations

from collections.abc import Callable

from simtrain.graph.builders.cnn import build_resnet
from simtrain.graph.builders.cnn_plain import build_mobilenet, build_vgg
from simtrain.graph.builders.mlp import build_mlp
from simtrain.graph.builders.transformer import build_transformer
from simtrain.graph.builders.vit import build_vit
from simtrain.graph.op import ModelParts
from simtrain.graph.spec import ModelSpec

__all__ = ["build_parts"]

_CNN = {"resnet": build_resnet, "vgg": build_vgg, "mobilenet": build_mobilenet}


def build_parts(spec: ModelSpec, rebuild: Callable[[int], object] | None = None) -> ModelParts:
    """The ops and edges of ``spec``; ``rebuild(seq_len)`` is kept for ``Model.with_seq_len``."""
    if spec.family == "transformer":
        return build_transformer(spec, rebuild)
    if spec.family == "vit":
        return build_vit(spec, rebuild)
    if spec.family == "mlp":
        return build_mlp(spec, rebuild)
    return _CNN[spec.cnn.arch](spec, rebuild)
