"""Realisation: what a training step loses beyond the sum of its kernels, as named lines of the step.

Component benchmarks time kernels in isolation. A training step also idles between kernels, waits for
its slowest rank, and runs its compute beside collectives that take SMs and memory bandwidth. Each of
these is a line of ``StepReport.time_breakdown_s`` with its own knob on the stack
(simtrain/specs/stack.py), never folded into an efficiency:

* ``interference`` — the compute beside an overlapped collective runs on fewer SMs: the slowdown is
  the SM share the collective holds (``comm_sms`` / the device's SMs) plus a residual
  (``comm_compute_slowdown``: memory-bandwidth contention, measured 1.13–1.39× GEMM slowdowns beside
  NCCL in Echo, −18.9 % compute on average under overlap in Lee et al. 2025), charged on the hidden
  part of every overlapped collective (``CommTask.exposed_s``) and reported apart from the exposed
  communication;
* ``idle_gaps`` — ``idle_gap_fraction`` × the pipeline's span: every kernel stretched by the same
  share stretches the whole schedule (its bubble too) by that share;
* ``host_gaps`` — ``kernel_gap_s`` per kernel on the critical rank, scaled the same way;
* ``stragglers`` — the wait for the slowest of the job's ranks with the stack's rank variation
  (``straggler_sigma``, cost/variability.py), over what the device's own measured jitter already
  charges inside ``comm_exposed``; plus the span a persistently slow host costs, times the chance
  that the job's hosts include one (``slow_host_fraction``, ``slow_host_step_loss``:
  :func:`slow_host_share`).

The stack's knobs are fitted on public runs (validation/published/fit_priors.py); the reference
stack leaves them all at zero.
"""

from __future__ import annotations

import math

import numpy as np

from simtrain.glossary import OpClass

__all__ = ["interference_slowdown", "comm_sm_share", "attention_realised", "scaled_attention_kernels",
           "realisation_lines", "slow_host_share", "slow_host_shares", "hosts_of", "interference_s", "hidden_cost_s", "STEP_LINES", "step_scaled",
           "cpu_comm_compute_slowdown", "COLLECTIVE_THREADS_PER_RANK"]

STEP_LINES = ("idle_gaps", "host_gaps", "stragglers")
"""The lines charged once per step on the critical rank (``interference`` sits inside its collectives)."""


def comm_sm_share(comm_sms: int, device) -> float:
    """Share of the device's SMs (matrix-unit tiles that run in parallel) a collective holds; 0 on a
    device without that geometry."""
    unit = device.matrix_unit
    tiles = getattr(unit, "parallel_tiles", None) if unit is not None else None
    if not comm_sms or not tiles:
        return 0.0
    return min(1.0, comm_sms / tiles)


def interference_slowdown(stack, device) -> float:
    """Seconds of compute lost per second of hidden collective: the SM share the collective holds plus
    the stack's residual, at most 1 (a collective cannot cost more than running it exposed)."""
    return min(1.0, comm_sm_share(stack.comm_sms, device) + stack.comm_compute_slowdown)


def scaled_attention_kernels(kernels: dict, k: float) -> dict:
    """Every fused-attention kernel family's forward and backward ceilings × ``k``, clipped at 1."""
    return {name: kern.model_copy(update={"fw_peak_fraction": min(1.0, kern.fw_peak_fraction * k),
                                          "bw_peak_fraction": min(1.0, kern.bw_peak_fraction * k)})
            for name, kern in kernels.items()}


def attention_realised(eff, k: float):
    """``eff`` with its attention ceilings (the class curve and every fused-kernel family) × ``k``,
    clipped at 1: the stack's attention kernel as it runs the model (``Stack.attention_realisation``)."""
    if k == 1.0:
        return eff
    compute = dict(eff.compute)
    if OpClass.ATTENTION in compute:
        curve = compute[OpClass.ATTENTION]
        compute[OpClass.ATTENTION] = curve.model_copy(update={"peak_fraction": min(1.0, curve.peak_fraction * k)})
    return eff.model_copy(update={"compute": compute,
                                  "attention_kernels": scaled_attention_kernels(eff.attention_kernels, k)})


def hidden_cost_s(tasks) -> float:
    """Σ slowdown × hidden seconds of ``tasks``: what their overlapped part costs the compute beside them."""
    return sum(t.slowdown * min(t.total_s, t.overlap_s) for t in tasks)


def interference_s(stage, micro_batches: int) -> float:
    """Seconds the critical rank's compute loses beside its overlapped collectives in one step (part
    of what ``CommTask.exposed_s`` charges)."""
    return micro_batches * hidden_cost_s(stage.comm) + hidden_cost_s(stage.step_comm)


def step_scaled(stack) -> bool:
    """True when the stack's realisation stretches the span by shares only (idle gaps, slow hosts; no
    host gaps, no rank variation): the step is then its span stretched by one factor per point, which
    the vectorized path factors exactly."""
    return stack.kernel_gap_s == 0 and stack.straggler_sigma == 0


def hosts_of(ranks, devices_per_node: int):
    """Hosts (nodes) a job of ``ranks`` ranks spans, ``devices_per_node`` to a host (``ranks`` an int or
    an integer array)."""
    return -(-ranks // max(1, devices_per_node))


def slow_host_share(stack, hosts) -> float:
    """Expected share of the span lost to persistently slow hosts: ``slow_host_step_loss`` × the chance
    that at least one of the job's ``hosts`` is slow, ``1 − (1 − slow_host_fraction)^hosts`` (each host
    slow independently; MegaScale §5.1 and §6.3, ``Stack.slow_host_fraction``)."""
    return slow_host_shares(stack.slow_host_fraction, stack.slow_host_step_loss, hosts)


def slow_host_shares(fraction, loss, hosts):
    """:func:`slow_host_share` on arrays (the vectorized sweep's points): ``loss · (1 − (1 − q)^hosts)``,
    as ``−expm1(hosts · log1p(−q))`` so that a rare q keeps its precision."""
    return loss * -np.expm1(hosts * np.log1p(-np.asarray(fraction, dtype=float)))


def realisation_lines(stack, stage, micro_batches: int, span_s: float, ranks: int, device_sigma: float,
                      hosts: int = 1) -> dict:
    """``idle_gaps``, ``host_gaps`` and ``stragglers`` seconds of one step on the critical rank.

    ``span_s``: the rank's pipeline span (first forward to last backward, bubbles included); the
    stage's own work is ``micro_batches`` × its micro-batch time, so the span over that is how much a
    per-kernel gap on every stage stretches the schedule. ``hosts``: the nodes the job spans (a slow
    one gates its pipeline's whole span, and the data-parallel sync makes every rank wait for it)."""
    from simtrain.cost.variability import sync_wait_seconds
    own_s = micro_batches * stage.microbatch_s
    stretch = span_s / own_s if own_s > 0 else 1.0
    work_s = micro_batches * (stage.fw_s + stage.bw_s + stage.recompute_s)
    sigma = math.hypot(device_sigma, stack.straggler_sigma)
    stragglers = 0.0
    if stack.straggler_sigma > 0 and ranks > 1:
        stragglers = sync_wait_seconds(work_s, ranks, sigma) - sync_wait_seconds(work_s, ranks, device_sigma)
    return {"idle_gaps": stack.idle_gap_fraction * span_s,
            "host_gaps": stack.kernel_gap_s * micro_batches * stage.kernels * stretch,
            "stragglers": max(0.0, stragglers) + float(slow_host_share(stack, hosts)) * span_s}


COLLECTIVE_THREADS_PER_RANK = 1
"""Threads a CPU rank's collectives run on (gloo drives each process group from one thread)."""


def cpu_comm_compute_slowdown(cores: int, ranks: int, threads_per_rank: int) -> float:
    """``comm_compute_slowdown`` of CPU ranks whose collectives run on the same host's cores (gloo:
    the reduction and the socket copies are CPU work on a gloo thread of each rank).

    A collective overlapped with the backward is hidden only if its thread finds a core the compute
    does not use. Each rank needs one such core beside its ``threads_per_rank`` compute threads; a
    rank without one time-slices the collective with its compute, so the hidden collective still
    costs its whole time. The result is the share of ranks without a spare core:
    clamp((ranks · (threads_per_rank + 1) − cores) / ranks, 0, 1) — 0 with a spare core per rank,
    1 when the compute threads fill every core (two 1-thread ranks on a 2-core machine)."""
    if cores < 1 or ranks < 1 or threads_per_rank < 1:
        raise ValueError(f"cores, ranks and threads_per_rank must be ≥ 1, got {cores}, {ranks}, {threads_per_rank}")
    short = ranks * (threads_per_rank + COLLECTIVE_THREADS_PER_RANK) - cores
    return min(1.0, max(0.0, short / ranks))
