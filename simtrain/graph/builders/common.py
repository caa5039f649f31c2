"""Assembling op graphs from parts: a part is the ops of one pipeline block with its data edges.

A :class:`PartBuilder` appends ops to one block; each op names its inputs by their local names
within the block (``"attn/core"``), or :data:`IN` for the block's input. A finished :class:`Part`
can be :func:`relocate` d to another block name (a transformer builds one layer and copies it for
every layer, so all layers are identical records except their name and block), and
:func:`assemble` chains parts into a :class:`~simtrain.graph.model.Model`: the exit of one part feeds
every entry of the next.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from simtrain.graph.op import ModelParts, Op
from simtrain.graph.rules import make_op

__all__ = ["IN", "Part", "PartBuilder", "relocate", "assemble"]

IN = "<in>"
"""Stands for the block's input in an op's ``inputs``."""


@dataclass(frozen=True, slots=True)
class Part:
    """The ops of one block, its internal edges (local names), which ops read the block input
    (``entries``), and which op's output leaves it (``exit``)."""

    block: str
    ops: tuple[Op, ...]
    edges: tuple[tuple[str, str], ...]
    entries: tuple[str, ...]
    exit: str

    def full(self, local: str) -> str:
        return f"{self.block}/{local}"


class PartBuilder:
    """Appends ops to one block; ``add`` returns the op's local name, for later ``inputs``."""

    def __init__(self, block: str) -> None:
        self.block = block
        self._ops: list[Op] = []
        self._edges: list[tuple[str, str]] = []
        self._entries: list[str] = []
        self._last: str | None = None

    def add(self, kind: str, local: str, *, inputs: tuple[str, ...] | None = None, **params: Any) -> str:
        """Add op ``kind`` named ``block/local``; ``inputs`` default to the previous op (or IN)."""
        srcs = inputs if inputs is not None else ((self._last,) if self._last else (IN,))
        self._ops.append(make_op(kind, f"{self.block}/{local}", self.block, **params))
        for src in srcs:
            if src == IN:
                self._entries.append(local)
            else:
                self._edges.append((src, local))
        self._last = local
        return local

    @property
    def last(self) -> str | None:
        return self._last

    def build(self, exit: str | None = None) -> Part:
        if not self._ops:
            raise ValueError(f"block {self.block!r} has no ops")
        return Part(self.block, tuple(self._ops), tuple(self._edges), tuple(self._entries), exit or self._last)


def relocate(part: Part, block: str) -> Part:
    """The same part under another block name: names change, records stay otherwise identical."""
    if block == part.block:
        return part
    cut = len(part.block) + 1
    ops = tuple(replace(op, name=f"{block}/{op.name[cut:]}", block=block) for op in part.ops)
    return Part(block, ops, part.edges, part.entries, part.exit)


def assemble(name: str, parts: list[Part], *, arch: Any = None, seq_len: int | None = None,
             rebuild: Callable[[int], object] | None = None, meta: dict | None = None) -> ModelParts:
    """Chain ``parts`` into one model's parts (edges: internal ones, and each exit → the next entries)."""
    ops: list[Op] = []
    edges: list[tuple[str, str]] = []
    prev: Part | None = None
    for part in parts:
        ops.extend(part.ops)
        edges.extend((part.full(a), part.full(b)) for a, b in part.edges)
        if prev is not None:
            edges.extend((prev.full(prev.exit), part.full(e)) for e in part.entries)
        prev = part
    return ModelParts(name, tuple(ops), edges=tuple(edges), arch=arch, seq_len=seq_len, rebuild=rebuild, meta=meta)
