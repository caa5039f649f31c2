"""Split captured backward work into activation-gradient (agrad) and weight-gradient (wgrad).

Method (data flow over tensor identity, no shape guessing): the inputs of the operators
AccumulateGrad runs for a parameter are the final parameter gradients — the *sinks*. Walking the
backward operators in reverse execution order, a produced tensor is *weight-only* (``W``) when it
is a sink or when every operator that consumes it is itself weight-only; it is ``A`` when any
consumer propagates it further towards the inputs, and *dead* when nothing consumes it. A tensor
handed from one autograd node to another is the gradient of the receiving node's forward output:
an activation gradient (``A``) unless that output does not derive from the inputs (``W.t()``
inside ``F.linear``, a position embedding of ``arange``: the node is *weight-like*), or unless the
consumer is the engine's gradient accumulation (``add``), which keeps the meaning of what it sums
(tied weights). An operator is wgrad when it has at least one weight-only output and no ``A``
output (or it is AccumulateGrad's own work), otherwise agrad. So for a linear's backward the
``mm`` producing dW and the ``sum`` producing db are wgrad, the ``mm`` producing dX is agrad.
Operators that compute both kinds at once (``convolution_backward``, the norms' backward) carry
one rule part per output and each part takes its output's status.

Per micro-batch rather than per sample: a weight-only tensor is *weight-shaped* when it is a
sink, when it is handed to a weight-like node (it is the gradient of a tensor that does not scale
with the batch), or when a shape-preserving operator (view, copy, elementwise) turns it into a
weight-shaped tensor. The reductions that produce dW (``mm``, ``sum``, ``convolution_backward``,
``embedding_dense_backward``) read batch-sized tensors, so their inputs are not weight-shaped.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from simtrain.graph.capture.events import AtenEvent, TensorMeta

__all__ = ["BackwardPhases", "classify_backward"]

_ACCUMULATE = frozenset({"add", "add_"})


@dataclass(frozen=True, slots=True)
class BackwardPhases:
    """Per backward event: ``agrad`` / ``wgrad``; per value number: ``W`` / ``A`` / ``dead`` and
    whether it is weight-shaped (does not scale with the batch)."""

    event_phase: dict[int, str]
    status: dict[int, str]
    weight_shaped: frozenset[int]
    fixed: frozenset[int] = frozenset()
    """Forward tensors a rule declares batch-independent (batch-norm statistics)."""

    def per_microbatch(self, m: TensorMeta) -> bool:
        """True when a tensor read or written in the backward does not scale with the batch."""
        if m.model_state or m.footprint <= 1 or m.vn in self.fixed:
            return True
        if m.vn not in self.status:  # a forward tensor read by the backward
            return not m.batch
        return m.vn in self.weight_shaped

    def out_phase(self, ev: AtenEvent, out_index: int) -> str:
        m = ev.outs[out_index] if out_index < len(ev.outs) else None
        if m is None:
            return self.event_phase.get(ev.index, "agrad")
        return "wgrad" if self.status.get(m.vn) == "W" else "agrad"


def classify_backward(events: list[AtenEvent], sinks: set[int],
                      shape_preserving: Callable[[AtenEvent], bool]) -> BackwardPhases:
    """Statuses of every backward event and tensor (see the module docstring)."""
    bw = [e for e in events if e.phase == "bw"]
    consumers: dict[int, list[AtenEvent]] = defaultdict(list)
    for e in bw:
        for m in e.inputs:
            consumers[m.vn].append(e)
    status: dict[int, str] = {}
    shaped: set[int] = set()
    event_phase: dict[int, str] = {}
    for e in reversed(bw):
        live = []
        for m in e.outs:
            if m is None:
                continue
            users = consumers.get(m.vn, [])
            st = _status(e, m, sinks, users, event_phase)
            status[m.vn] = st
            if st == "W" and _weight_shaped(e, m, sinks, users, shaped, shape_preserving):
                shaped.add(m.vn)
            if st != "dead":
                live.append(st)
        weight_only = e.accumulate_into_param or (bool(live) and all(s == "W" for s in live))
        event_phase[e.index] = "wgrad" if weight_only else "agrad"
    return BackwardPhases(event_phase, status, frozenset(shaped))


def _crosses(producer: AtenEvent, consumer: AtenEvent) -> bool:
    return consumer.node_key != producer.node_key and not consumer.accumulate_into_param


def _status(producer: AtenEvent, m: TensorMeta, sinks: set[int], users: list[AtenEvent],
            event_phase: dict[int, str]) -> str:
    if m.vn in sinks:
        return "W"
    if not users:
        return "dead"
    for c in users:
        if _crosses(producer, c) and c.name not in _ACCUMULATE and not c.node_weightlike:
            return "A"  # handed to another node: the gradient of a batch-derived forward tensor
        if event_phase.get(c.index) != "wgrad":
            return "A"
    return "W"


def _weight_shaped(producer: AtenEvent, m: TensorMeta, sinks: set[int], users: list[AtenEvent],
                   shaped: set[int], shape_preserving: Callable[[AtenEvent], bool]) -> bool:
    if m.vn in sinks:
        return True
    for c in users:
        if _crosses(producer, c) and c.name not in _ACCUMULATE and c.node_weightlike:
            return True
        if shape_preserving(c) and any(o is not None and o.vn in shaped for o in c.outs):
            return True
    return False
