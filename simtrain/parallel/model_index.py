"""A per-model index that lets the cost layer cost each distinct op once.

A transformer repeats the same layer: 96 layers × 20 ops are 20 distinct records. The index maps
every block to its (signature id, count) pairs, so a stage's cost is Σ count × cost(representative)
— the "per layer × layers" expression of DESIGN.md — instead of a walk over every op record.
Built once per Model and kept in ``model.meta``.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from simtrain.graph.model import Model
from simtrain.graph.op import Op

__all__ = ["ModelIndex", "model_index", "op_signature", "pattern_name"]

_LAYER_INDEX = re.compile(r"\.\d+(?=/|$)")
REPEATED_BLOCK = re.compile(r".*\.\d+$")
"""Blocks named like ``layers.7`` are the repeated layers (full recomputation applies to them)."""


NAME_ATTRS = frozenset({"module"})
"""Op attributes that name where an op sits (the torch importer's module path), like ``Op.name``:
left out of the signature, or no two layers of an imported model would ever share one."""


def op_signature(op: Op) -> tuple:
    """Ops with the same signature cost the same on every rank (name, block and module path aside)."""
    return (op.kind, op.op_class, op.flops, op.act_read, op.act_write, op.weight_read, op.weight_write,
            op.gemm, op.attention, op.tp_split, op.moe, op.param_count, op.saved, op.out_shape,
            op.shapes[:1], tuple(a for a in op.attrs if a[0] not in NAME_ATTRS))


def pattern_name(name: str) -> str:
    """``layers.7/attn/qkv`` → ``layers.*/attn/qkv``: the name of an op repeated across layers."""
    return _LAYER_INDEX.sub(".*", name)


@dataclass(frozen=True)
class ModelIndex:
    reps: tuple[Op, ...]
    """Representative op of each signature id."""
    block_items: dict[str, tuple[tuple[int, int], ...]]
    """Block name → ((signature id, count), ...) in first-appearance order."""
    block_first: dict[str, Op]
    block_last: dict[str, Op]
    names: tuple[str, ...]
    """Pattern name of each signature id (for the top-ops table)."""
    _model_ops: tuple[Op, ...] = field(default=(), compare=False, repr=False)
    memo: dict = field(default_factory=dict, compare=False, repr=False)
    """Caches keyed by the caller (stage items, op costs per device and layout): the model is
    immutable, so what is derived from it can be kept with it."""

    def block_of(self, op_name: str) -> str | None:
        """The block holding the op named ``op_name`` (None when there is none)."""
        table = self.memo.get("block_of")
        if table is None:
            table = self.memo["block_of"] = {op.name: op.block for op in self._model_ops}
        return table.get(op_name)

    def shape_key(self, blocks) -> tuple:
        """Equal keys: the blocks hold the same ops in the same counts (stages 1..p-2 of a GPT)."""
        memo_key = ("shape", blocks)
        key = self.memo.get(memo_key)
        if key is None:
            key = self.memo[memo_key] = tuple((bool(REPEATED_BLOCK.match(b)), self.block_items[b]) for b in blocks)
        return key

    def items(self, blocks) -> list[tuple[Op, int, bool, str]]:
        """(representative op, count, in a repeated block, pattern name) over ``blocks``, merged by signature."""
        key = ("items", tuple(blocks))
        cached = self.memo.get(key)
        if cached is not None:
            return cached
        acc: Counter = Counter()
        for b in blocks:
            repeated = bool(REPEATED_BLOCK.match(b))
            for sig, n in self.block_items[b]:
                acc[(sig, repeated)] += n
        out = [(self.reps[s], n, rep, self.names[s]) for (s, rep), n in acc.items()]
        self.memo[key] = out
        return out


def model_index(model: Model) -> ModelIndex:
    idx = model.meta.get("_index")
    if idx is not None:
        return idx
    ids: dict[tuple, int] = {}
    reps: list[Op] = []
    names: list[str] = []
    per_block: dict[str, Counter] = {}
    first: dict[str, Op] = {}
    last: dict[str, Op] = {}
    for op in model.ops:
        # the pattern name is part of the key so that ops of equal shape but different roles
        # (attn/norm vs mlp/norm) stay apart in the top-ops table; they cost one call each
        sig = (op_signature(op), pattern_name(op.name))
        i = ids.get(sig)
        if i is None:
            i = ids[sig] = len(reps)
            reps.append(op)
            names.append(pattern_name(op.name))
        per_block.setdefault(op.block, Counter())[i] += 1
        first.setdefault(op.block, op)
        last[op.block] = op
    idx = ModelIndex(tuple(reps), {b: tuple(c.items()) for b, c in per_block.items()}, first, last, tuple(names),
                     model.ops)
    model.meta["_index"] = idx
    return idx
