"""Records of a captured training step, free of torch: what the ATen rules and the importer consume.

A capture (:mod:`simtrain.graph.capture.capture`) turns every ATen operator that ran during one
forward + loss + backward into an :class:`AtenEvent` whose tensors are replaced by
:class:`TensorMeta` (shape, dtype, storage identity, provenance). Keeping these records free of
torch lets the rules be tested on hand-built shapes and keeps the importer deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod
from typing import Any

__all__ = ["TensorMeta", "AtenEvent", "SavedRecord", "CallRecord", "numel"]


def numel(shape: tuple[int, ...]) -> int:
    """Element count of a shape (1 for a 0-d tensor)."""
    return int(prod(shape))


@dataclass(frozen=True, slots=True)
class TensorMeta:
    """One tensor as an ATen op saw it.

    ``vn`` is a value number, unique per produced tensor object within the capture (tensor
    identity, not storage: a view gets its own ``vn`` but shares ``storage``). ``batch`` is True when
    the tensor derives from the example inputs (so its size scales with the batch); parameters,
    buffers and constants built from them are not batch-derived.
    """

    vn: int
    shape: tuple[int, ...]
    dtype: str
    itemsize: int
    floating: bool
    storage: int
    storage_elems: int
    is_param: bool = False
    is_buffer: bool = False
    batch: bool = False

    @property
    def numel(self) -> int:
        return numel(self.shape)

    @property
    def footprint(self) -> int:
        """Elements actually behind the tensor: a broadcast (expanded, stride-0) view reads its
        storage once, so an op reading it moves min(numel, storage elements)."""
        return min(self.numel, self.storage_elems) if self.storage_elems > 0 else self.numel

    @property
    def model_state(self) -> bool:
        return self.is_param or self.is_buffer


@dataclass(slots=True)
class AtenEvent:
    """One ATen operator call of the captured step.

    ``args`` maps every schema argument name to its value, tensors replaced by :class:`TensorMeta`
    (lists of tensors by lists of metas). ``outs`` are the flattened tensor outputs (``None`` where
    an optional output was not produced). ``phase`` is ``fw`` for everything before
    ``loss.backward()`` and ``bw`` after; the importer refines ``bw`` into agrad / wgrad.
    """

    index: int
    name: str
    """Overload packet name without namespace: ``mm``, ``convolution_backward``."""
    overload: str
    phase: str
    call: int | None
    args: dict[str, Any]
    outs: tuple[TensorMeta | None, ...]
    node: str | None = None
    accumulate_into_param: bool = False
    """True for the ops AccumulateGrad runs for a parameter: their inputs are the final dW."""
    aliases_input: bool = False
    """True when an output shares storage with an input (views, in-place ops)."""
    node_key: int | None = None
    """Which autograd node ran this backward op (a per-capture counter), None outside any node."""
    node_weightlike: bool = False
    """True when that node's forward output does not derive from the inputs (``W.t()`` inside
    ``F.linear``, a position embedding of ``arange``): the gradient it receives is a weight-side
    gradient that does not scale with the batch, not an activation gradient."""

    def arg(self, name: str, default: Any = None) -> Any:
        v = self.args.get(name, default)
        return default if v is None else v

    @property
    def inputs(self) -> list[TensorMeta]:
        """Every tensor argument, in schema order (tensor lists flattened)."""
        out: list[TensorMeta] = []
        for v in self.args.values():
            if isinstance(v, TensorMeta):
                out.append(v)
            elif isinstance(v, (list, tuple)):
                out.extend(t for t in v if isinstance(t, TensorMeta))
        return out

    def tensor(self, name: str) -> TensorMeta | None:
        v = self.args.get(name)
        return v if isinstance(v, TensorMeta) else None

    @property
    def full_name(self) -> str:
        return f"aten.{self.name}.{self.overload}"


@dataclass(frozen=True, slots=True)
class SavedRecord:
    """One tensor storage autograd kept for backward (first sighting wins; see the importer)."""

    call: int | None
    storage: int
    nbytes: int
    dtype: str
    floating: bool
    producer: tuple[int, int] | None
    """(event index, output index) of the op that created the storage, when captured."""
    batch: bool
    numel: int
    itemsize: int


@dataclass(slots=True)
class CallRecord:
    """One top-level torch function call (``F.linear``, ``Tensor.__add__``, ...) of the forward.

    The importer turns each call that does any work into one :class:`~simtrain.graph.op.Op`: its
    forward ATen ops plus every backward ATen op run by the autograd nodes it created.
    """

    index: int
    func: str
    module: str
    """Module path in state-dict spelling (``layers.3.attn.qkv``); ``""`` for the root, ``loss``."""
    in_metas: tuple[TensorMeta, ...] = ()
    out_metas: tuple[TensorMeta, ...] = ()
    attrs: dict[str, Any] = field(default_factory=dict)
