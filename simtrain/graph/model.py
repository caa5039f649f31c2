"""Model: an op graph (networkx DiGraph over :class:`Op` records) with its pipeline blocks.

Counts on a Model are per sample; the cost layer scales them by the micro-batch. A Model built from
an architecture spec (``arch``) can be rebuilt for another sequence length (``with_seq_len``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import networkx as nx

from simtrain.glossary import Phase
from simtrain.graph.builders import build_parts
from simtrain.graph.hf import hf_config_to_spec
from simtrain.graph.op import ModelParts, Op, PhaseCounts, UnmodelledOp
from simtrain.graph.spec import ModelSpec

__all__ = ["Model", "UnmodelledOp", "ModelParts", "build_model"]


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
        """Facts the layout checks need (heads, kv_heads, experts, blocks, layers: the repeated blocks,
        seq_len)."""
        cached = self.meta.get("_layout_facts")
        if cached is not None:
            return dict(cached)
        import re
        layers = sum(1 for b in self.blocks if re.match(r".*\.\d+$", b))
        facts: dict[str, int | None] = {"blocks": len(self.blocks), "seq_len": self.seq_len,
                                        "layers": layers or None}
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
    def from_parts(cls, parts: ModelParts) -> Model:
        """The Model of what a builder or an importer produced."""
        return cls(parts.name, parts.ops, edges=None if parts.edges is None else list(parts.edges), arch=parts.arch,
                   seq_len=parts.seq_len, unmodelled=parts.unmodelled, rebuild=parts.rebuild, meta=parts.meta)

    @classmethod
    def from_hf_config(cls, path_or_dict, *, seq_len: int | None = None, name: str | None = None) -> Model:
        """A Hugging Face ``config.json`` (path, folder or dict), no weights needed; ``seq_len``
        defaults to the config's maximum positions."""
        return build_model(hf_config_to_spec(path_or_dict, seq_len=seq_len, name=name))

    @classmethod
    def from_torch(cls, module, example_inputs, loss_fn=None, **kwargs) -> Model:
        """Capture the real ATen graph of one training step of ``module``; dim 0 of inputs is the batch
        (see :func:`simtrain.graph.capture.importer.torch_parts` for the keyword options)."""
        from simtrain.graph.capture.importer import torch_parts  # imports torch: only when asked
        return cls.from_parts(torch_parts(module, example_inputs, loss_fn=loss_fn, **kwargs))

    def summary(self):
        """Per-op table (pandas DataFrame): params, FLOPs by phase, activation bytes, saved bytes."""
        from simtrain.graph.summary import summary_frame
        return summary_frame(self)

    def __repr__(self) -> str:
        return (f"Model({self.name!r}, ops={len(self.ops)}, blocks={len(self.blocks)}, "
                f"params={self.param_count:,}, seq_len={self.seq_len})")


def _rebuilder(spec: ModelSpec) -> Callable[[int], Model] | None:
    if not spec.is_sequence_model:
        return None
    return lambda seq_len: build_model(spec.with_seq_len(seq_len))


@functools.lru_cache(maxsize=128)
def build_model(spec: ModelSpec) -> Model:
    """The op graph of ``spec`` (cached: the same spec gives the same Model object, so a sweep that
    asks for the same model and sequence length again gets it back; ``with_seq_len`` goes through here)."""
    return Model.from_parts(build_parts(spec, _rebuilder(spec)))
