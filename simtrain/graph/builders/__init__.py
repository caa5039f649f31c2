"""Model builders: a :class:`~simtrain.graph.spec.ModelSpec` → a :class:`~simtrain.graph.model.Model`.

:func:`build_model` dispatches on the family (and the CNN arch) and caches by spec (specs are
frozen and hashable), so a sweep that asks for the same model and sequence length again gets the
same object; ``Model.with_seq_len`` goes through the same cache.
"""

from __future__ import annotations

import functools

from simtrain.graph.builders.cnn import build_resnet
from simtrain.graph.builders.cnn_plain import build_mobilenet, build_vgg
from simtrain.graph.builders.mlp import build_mlp
from simtrain.graph.builders.transformer import build_transformer
from simtrain.graph.builders.vit import build_vit
from simtrain.graph.model import Model
from simtrain.graph.spec import ModelSpec

__all__ = ["build_model"]

_CNN = {"resnet": build_resnet, "vgg": build_vgg, "mobilenet": build_mobilenet}


def _rebuilder(spec: ModelSpec):
    if not spec.is_sequence_model:
        return None
    return lambda seq_len: build_model(spec.with_seq_len(seq_len))


@functools.lru_cache(maxsize=128)
def build_model(spec: ModelSpec) -> Model:
    """The op graph of ``spec`` (cached: the same spec gives the same Model object)."""
    rebuild = _rebuilder(spec)
    if spec.family == "transformer":
        return build_transformer(spec, rebuild)
    if spec.family == "vit":
        return build_vit(spec, rebuild)
    if spec.family == "mlp":
        return build_mlp(spec, rebuild)
    return _CNN[spec.cnn.arch](spec, rebuild)
