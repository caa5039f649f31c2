"""Model: an op graph (networkx DiGraph over :class:`Op` records) with its pipeline blocks.

Counts on a Model are per sample; the cost layer scales them by the micro-batch. A Model built from
an architecture spec (``arch``) can be rebuilt for another sequence length (``with_seq_len``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import networkx as nx

from simtrain.glossary import Phase
from simtrain.graph.op import Op, PhaseCounts

__all__ = ["Model", "UnmodelledOp"]


@dataclass(frozen=True, slots=True)
class UnmodelledOp:
    """An operator an importer saw but has no rule for: listed and counted, never dropped."""

    name: str
    count: int
    phase: str
    example_shapes: tuple[tuple[int, ...], ...] = ()


class Model:
    """What is trained. Construct through a builder, ``load_model``, ``from_hf_config`` or ``from_torch``."""

    __slots__ = ("name", "ops", "graph", "blocks", "arch", "seq_len", "unmodelled", "_rebuild",
                 "_param_count", "meta")

    def __init__(self, name: str, ops: list[Op] | tuple[Op, ...], *, edges: list[tuple[str, str]] | None = None,
                 arch: Any = None, seq_len: int | None = None, unmodelled: tuple[UnmodelledOp, ...] = (),
                 rebuild: Callable[[int], Model] | None = None, meta: dict | None = None) -> None:
        self.name = name
        self.ops: tuple[Op, ...] = tuple(ops)
        names = [op.name for op in self.ops]
        if len(set(names)) != len(names):
            dup = sorted({n for n in names if names.count(n) > 1})[:5]
            raise ValueError(f"model {name!r}: duplicate op names {dup}")
        self.graph = nx.DiGraph()
        for op in self.ops:
            self.graph.add_node(op.name, op=op)
        chain = edges if edges is not None else list(zip(names, names[1:], strict=False))
        self.graph.add_edges_from(chain)
        blocks: list[str] = []
        for op in self.ops:
            if not blocks or blocks[-1] != op.block:
                if op.block in blocks:
                    raise ValueError(f"model {name!r}: block {op.block!r} is not contiguous in op order")
                blocks.append(op.block)
        self.blocks: tuple[str, ...] = tuple(blocks)
        self.arch = arch
        self.seq_len = seq_len
        self.unmodelled = tuple(unmodelled)
        self._rebuild = rebuild
        self._param_count = sum(op.param_count for op in self.ops)
        self.meta = dict(meta or {})

    # --- sizes ---------------------------------------------------------------------------------
    @property
    def param_count(self) -> int:
        """Trainable + frozen parameters, shared (tied) weights counted once."""
        return self._param_count

    def flops_per_sample(self, phase: Phase | str | None = None) -> float:
        """Model FLOPs per sample (fw + agrad + wgrad when ``phase`` is None)."""
        total = self.phase_flops()
        return total.total if phase is None else total.get(phase)

    def phase_flops(self) -> PhaseCounts:
        out = PhaseCounts()
        for op in self.ops:
            out = out + op.flops
        return out

    @property
    def tokens_per_sample(self) -> int:
        return self.seq_len or 1

    def block_ops(self, block: str) -> tuple[Op, ...]:
        return tuple(op for op in self.ops if op.block == block)

    def layout_facts(self) -> dict[str, int | None]:
        """Facts the layout checks need (heads, kv_heads, experts, blocks, seq_len)."""
        cached = self.meta.get("_layout_facts")
        if cached is not None:
            return dict(cached)
        facts: dict[str, int | None] = {"blocks": len(self.blocks), "seq_len": self.seq_len}
        for op in self.ops:
            if op.attention is not None and "heads" not in facts:
                facts["heads"], facts["kv_heads"] = op.attention.heads, op.attention.kv_heads
            if op.moe is not None and "experts" not in facts:
                facts["experts"] = op.moe.experts
        self.meta["_layout_facts"] = dict(facts)
        return facts

    # --- variants ------------------------------------------------------------------------------
    def with_seq_len(self, seq_len: int | None) -> Model:
        """The same architecture at another sequence length (rebuilt; imported graphs cannot)."""
        if seq_len is None or seq_len == self.seq_len:
            return self
        if self._rebuild is None:
            from simtrain.errors import SpecError
            raise SpecError.one(None, "seq_len", f"model {self.name!r} was imported at seq_len="
                                f"{self.seq_len} and cannot be rebuilt at {seq_len}")
        return self._rebuild(seq_len)

    # --- constructors living elsewhere ---------------------------------------------------------
    @classmethod
    def from_hf_config(cls, path_or_dict, **kwargs) -> Model:
        """A Hugging Face ``config.json`` (path or dict), no weights needed."""
        from simtrain.graph.hf import from_hf_config
        return from_hf_config(path_or_dict, **kwargs)

    @classmethod
    def from_torch(cls, module, example_inputs, loss_fn=None, **kwargs) -> Model:
        """Capture the real ATen graph of one training step of ``module``; dim 0 of inputs is the batch."""
        from simtrain.graph.torch_import import from_torch
        return from_torch(module, example_inputs, loss_fn=loss_fn, **kwargs)

    def summary(self):
        """Per-op table (pandas DataFrame): params, FLOPs by phase, activation bytes, saved bytes."""
        from simtrain.graph.summary import summary_frame
        return summary_frame(self)

    def __repr__(self) -> str:
        return (f"Model({self.name!r}, ops={len(self.ops)}, blocks={len(self.blocks)}, "
                f"params={self.param_count:,}, seq_len={self.seq_len})")
