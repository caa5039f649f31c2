"""What the graph's own helpers read of a model: a Protocol, so the modules that graph/model.py calls
(summary.py for ``Model.summary``, capture/importer.py for ``Model.from_torch``) can name the type of
the model they are handed without importing graph/model.py back (no import circle, type-only ones
included). :class:`~simtrain.graph.model.Model` satisfies it."""

from __future__ import annotations

from typing import Any, Protocol

from simtrain.graph.op import Op, UnmodelledOp

__all__ = ["ModelView"]


class ModelView(Protocol):
    """A built model graph: its name, ops in execution order, sequence length, metadata and the
    operators it could not model."""

    name: str
    ops: tuple[Op, ...]
    seq_len: int | None
    unmodelled: tuple[UnmodelledOp, ...]
    meta: dict[str, Any]

    @property
    def param_count(self) -> int: ...
