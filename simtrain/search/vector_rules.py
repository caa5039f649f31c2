"""The per-configuration combination rules of the estimate, over numpy arrays.

Each function here is the array form of one scalar rule and names it; the expressions are written in
the same order as the scalar ones so that both paths give the same floating-point results (the
vector-vs-scalar test, tests/unit/test_vector.py, holds them together). The costly parts — op costs,
collective times, memory terms — are not here: the vectorized path asks the scalar cost rules for
them once per distinct sub-configuration (search/vector_core.py).
"""

from __future__ import annotations

import numpy as np

from simtrain.parallel.chunk_sync import bucketed_exposed_s, gather_exposed_s, grad_sync_exposed_s

__all__ = ["exposed_s", "host_bound_s", "bucketed_exposed_s", "prefetched_exposed_s", "step_sync_s",
           "accumulated_sync_s"]


def exposed_s(total_s, overlap_s, slowdown: float):
    """``CommTask.exposed_s`` (parallel/comm_task.py): max(0, total − overlap) + slowdown · hidden."""
    hidden = np.minimum(total_s, overlap_s)
    return np.maximum(0.0, total_s - overlap_s) + slowdown * hidden


def host_bound_s(gpu_s, kernels, host_dispatch_s, gpu_waits_on_cpu, beside_s=0.0):
    """``parallel.program.host_bound_s``: the GPU waits max(0, CPU − GPU − beside) for dispatch (or
    the two add when the GPU waits on every dispatch); the stack's knobs are per-configuration arrays."""
    cpu_s = kernels * host_dispatch_s
    return np.where(gpu_waits_on_cpu, gpu_s + cpu_s, gpu_s + np.maximum(0.0, cpu_s - gpu_s - beside_s))


def prefetched_exposed_s(gather_s, compute_s, layers, prefetch):
    """``fsdp_comm.prefetched_exposed_s``: per-layer gathers prefetched ``prefetch`` layers ahead
    (every gather waited for without prefetch)."""
    return np.where(prefetch == 0, layers * gather_s, gather_s + (layers - 1) * np.maximum(0.0, gather_s - compute_s))


def step_sync_s(d: dict, fw_task_s, bw_task_s, gather_s, zero_stage, dp_overlap, slowdown, windows):
    """(sync before the first forward, sync after the last backward, interference) of
    ``comm_tasks.step_comm`` for ranks whose group has a gradient sync; interference is
    ``realisation.hidden_cost_s`` of those tasks. ``d``: the stage's scalar pieces per configuration — the
    gradient collective's seconds, bytes and buckets, the parameter all-gather's (ZeRO-1/2; 0 s and one
    bucket otherwise); ``zero_stage``, ``dp_overlap``, ``slowdown``: per-configuration arrays;
    ``windows``: the rank's chunk windows with per-configuration work counts (parallel/chunk_sync.py)."""
    hide = np.maximum(0.0, bw_task_s - gather_s)
    total = d["grad_s"]
    exposed = np.where(dp_overlap, grad_sync_exposed_s(total, d["grad_bytes"], d["bucket"], fw_task_s, hide, windows),
                       total)
    # a ZeRO-3 root unit's reduction (comm_tasks.step_comm, phase step-root) runs after the last op: exposed
    after = exposed_s(total, total - exposed, slowdown) + d["grad_root_s"]
    hidden = slowdown * np.minimum(total, total - exposed)
    ag = d["ag_s"]
    gathers = (zero_stage >= 1) & (zero_stage < 3)
    # Megatron-Core --overlap-param-gather: the all-gather hides behind the next step's first forward
    ag_exposed = gather_exposed_s(ag, d["ag_bytes"], d["bucket"], fw_task_s, bw_task_s, windows)
    before = np.where(gathers & dp_overlap, 0 + exposed_s(ag * 1, ag - ag_exposed, slowdown), 0.0)
    hidden = np.where(gathers & dp_overlap, hidden + slowdown * np.minimum(ag, ag - ag_exposed), hidden)
    after = np.where(gathers & ~dp_overlap, after + exposed_s(ag * 1, 0.0, slowdown), after)
    return before, after, hidden


def accumulated_sync_s(d: dict, micro_batches, hide_s, every_mb, dp_overlap, slowdown):
    """(exposed, interference) of ``comm_tasks._accumulated_reductions``: the m − 1 gradient reductions
    before the step's last, each behind its own micro-batch's backward (``hide_s``), for the points
    whose stack reduces every micro-batch (``every_mb``) and whose group has a gradient sync."""
    total = d["grad_s"]
    extra = np.where(every_mb & d["sync"], np.maximum(micro_batches - 1, 0), 0)
    exposed = np.where(dp_overlap, bucketed_exposed_s(total, d["grad_buckets"], np.maximum(0.0, hide_s)), total)
    # with a root unit's reduction after each (phase accum-root), exposed
    return extra * (exposed + slowdown * (total - exposed)) + extra * d["grad_root_s"], \
        extra * slowdown * (total - exposed)
