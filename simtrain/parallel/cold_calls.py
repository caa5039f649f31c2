"""In-step launch costs from each op's gap: how long since a kernel of the same signature last ran.

A CPU profile measures what a launch costs inside a step over the benchmarks' back-to-back calls
(``Efficiency.step_call_overhead_s``) after one gap of other kernels, and how that cost grows with
the gap (``Efficiency.step_call_half_gap_s``; calibrate/bench_memory.py). What goes cold is the
kernel's code path at its shapes: the same matmul on other tensors keeps it warm. So an op's gap is
the time since the last op of the same signature (kind, shapes, FLOPs and bytes; names aside) ran,
taken as the micro-batch's forward + backward time over the number of such ops in the model: a layer
repeated 32 times in a 1 ms step runs every ~30 µs and pays almost nothing; an op that runs once
per 100 ms step pays the full cost. The repeats of a transformer's or a ResNet stage's blocks are
spread over the step, so the mean spacing stands for each one's gap. With pipeline stages each rank
holds 1/p of the layers and 1/p of their repeats, so the ratio is the same.

The micro-batch time itself holds these costs, so it is solved by fixed-point iteration from the
warm time (every launch hot): the launch costs grow with the gap and the gap with them, so the
rounds rise to the fixed point (:data:`ITERATIONS`, :data:`TOLERANCE`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from simtrain.cost.compute import cold_call_scale
from simtrain.cost.op_cost import OpCost
from simtrain.graph.model import Model
from simtrain.graph.op import Op
from simtrain.parallel.model_index import model_index, op_signature
from simtrain.specs.hardware import Efficiency

__all__ = ["ColdCalls", "cold_calls", "kernel_counts", "ITERATIONS", "TOLERANCE"]

ITERATIONS = 200
"""Most fixed-point rounds for the micro-batch time; it stops once a round moves it by less than
:data:`TOLERANCE` of itself. Each round is arithmetic over the distinct ops only, and the rounds rise
monotonically to the fixed point (the launch costs grow with the gap and are bounded: the gap is
held at ``COLD_GAP_CAP_S``)."""
TOLERANCE = 1e-12


@dataclass(frozen=True)
class ColdCalls:
    cycle_s: float
    """One micro-batch's forward + backward on this rank, launch costs included (seconds)."""
    per_op: dict[int, float]
    """``id`` of each representative op (model_index) → the in-step cost of each of its launches."""

    def of(self, op: Op, eff: Efficiency) -> float:
        """The launch cost of ``op``; an op outside the index counts as the model's only one of its kind."""
        got = self.per_op.get(id(op))
        return got if got is not None else eff.step_call_overhead_s * cold_call_scale(self.cycle_s, eff)


def kernel_counts(model: Model) -> Counter:
    """Ops per signature over the whole model, names aside (``attn/norm`` and ``mlp/norm`` of equal
    shapes run the same kernel); kept with the model's index."""
    idx = model_index(model)
    counts = idx.memo.get("kernel_counts")
    if counts is None:
        counts = idx.memo["kernel_counts"] = Counter(op_signature(op) for op in model.ops)
    return counts


def cold_calls(model: Model, warm_cost: Callable[[Op], OpCost], eff: Efficiency) -> ColdCalls:
    """Each representative op's launch cost at its gap (module docstring); ``warm_cost`` prices an op
    with hot launches (``op_cost(..., call_overhead_s=0.0)``)."""
    idx = model_index(model)
    counts = kernel_counts(model)
    rows, warm_s = [], 0.0
    for op, n, _repeated, _name in idx.items(tuple(idx.block_items)):
        c = warm_cost(op)
        warm_s += n * (c.fw_s + c.bw_s)
        rows.append((op, n, c.fw_kernels + c.bw_kernels, counts[op_signature(op)] or 1))

    def launch_s(cycle: float, same: int) -> float:
        return eff.step_call_overhead_s * cold_call_scale(cycle / same, eff)
    cycle = warm_s
    for _ in range(ITERATIONS):
        nxt = warm_s + sum(n * kernels * launch_s(cycle, same) for _op, n, kernels, same in rows)
        done, cycle = abs(nxt - cycle) <= TOLERANCE * nxt, nxt
        if done:
            break
    return ColdCalls(cycle, {id(op): launch_s(cycle, same) for op, _n, _k, same in rows})
