"""Goodput over a long run: failures, checkpoints, restarts and stragglers, as a simpy process.

A run of ``steps`` synchronous steps saves a checkpoint after every K-th step (blocking, ``δ`` =
checkpoint bytes ÷ aggregate storage write bandwidth). Failures arrive as a Poisson process: with N
devices that each fail independently and exponentially with ``MTBF_device``, the job fails at rate
N / MTBF_device, so the job MTBF is ``M = MTBF_device / N`` (superposition of Poisson processes).
On a failure the run loses everything since its last durable checkpoint (a save cut short is not
durable), then restarts: ``R = restart_s + reload_s`` (reload = checkpoint bytes ÷ read bandwidth);
a failure during the restart starts it over. Wall time splits exactly into useful compute (steps ×
base step) + straggler slowdown (variability.py) + checkpoint saves + restarts + lost work
(recomputed).

Cost: the trainer is one simpy process that asks for *all* remaining work in one timeout and is
interrupted by the failure process; the checkpoints it passed are found by a binary search over the
cumulative segment times. So a run costs O(failures · log segments) events, not one per step or
per checkpoint. A replayed step takes the time it took the first time (draws belong to the step
index), which also puts runs with different checkpoint intervals on common random numbers.

Closed forms beside it (Young 1974, Daly 2006: young_daly.py) give the optimal interval and the
expected wall time; :func:`scan_checkpoint_intervals` finds the simulated optimum to compare.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from types import MappingProxyType

import numpy as np
import simpy

from simtrain.cost.variability import Variability, sample_step_factors
from simtrain.errors import SpecError
from simtrain.sim.goodput_report import LOST_KEYS, IntervalScan, RunEvent, RunPlan, RunResult
from simtrain.sim.young_daly import daly_interval_s, young_interval_s

__all__ = ["simulate_run", "plan_run", "scan_checkpoint_intervals", "RunPlan", "RunResult", "RunEvent",
           "IntervalScan", "LOST_KEYS"]

_MAX_SEGMENTS = 20_000_000
_MAX_VARIABLE_STEPS = 10_000_000  # per-step draws live in memory: ~6 float arrays of this length


def _bad(field_name: str, reason: str) -> SpecError:
    return SpecError.one(None, f"simulate_run.{field_name}", reason)


def _seconds(field_name: str, value, *, positive: bool = False, infinite: bool = False) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)
    if not ok or value < 0 or (positive and value == 0) or (math.isinf(value) and not infinite):
        kind = ("positive" if positive else "non-negative") + ("" if infinite else " finite")
        raise _bad(field_name, f"must be a {kind} number, got {value!r}")
    return float(value)


# --- inputs ------------------------------------------------------------------------------------------
def _step_inputs(step, cluster, devices, tokens_per_step) -> tuple[float, int, float | None]:
    if hasattr(step, "step_time_s"):  # a StepReport: evaluation amortised per step counts too
        if not getattr(step, "feasible", True):
            raise _bad("step", "the step is infeasible: " + "; ".join(step.reasons))
        base = step.step_time_s + getattr(step, "eval_time_per_step_s", 0.0)
        return (_seconds("step.step_time_s", base, positive=True), devices or step.devices_count,
                tokens_per_step or step.global_batch_size * step.tokens_per_sample)
    devices = devices or (cluster.devices_count if cluster is not None else None)
    if devices is None:
        raise _bad("devices", "a bare step time needs devices= or a cluster")
    return _seconds("step", step, positive=True), int(devices), tokens_per_step


def _steps_count(tokens, steps, tokens_per_step) -> int:
    if (tokens is None) == (steps is None):
        raise _bad("tokens", "give exactly one of tokens= and steps=")
    if steps is not None:
        if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
            raise _bad("steps", f"must be a positive integer, got {steps!r}")
        return int(steps)
    if not tokens_per_step:
        raise _bad("tokens_per_step", "tokens= with a bare step time needs tokens_per_step=")
    return max(1, math.ceil(_seconds("tokens", tokens, positive=True) / tokens_per_step))


def _job_mtbf(mtbf_device_s, mtbf_node_s, failure_times_s, devices: int, cluster) -> float:
    given = [x is not None for x in (mtbf_device_s, mtbf_node_s, failure_times_s)]
    if sum(given) > 1:
        raise _bad("mtbf_device_s", "give at most one of mtbf_device_s=, mtbf_node_s=, failure_times_s=")
    if mtbf_device_s is not None:
        return _seconds("mtbf_device_s", mtbf_device_s, positive=True, infinite=True) / devices
    if mtbf_node_s is not None:
        if cluster is None:
            raise _bad("mtbf_node_s", "needs a cluster (devices per node)")
        nodes = math.ceil(devices / cluster.node.devices_count)
        return _seconds("mtbf_node_s", mtbf_node_s, positive=True, infinite=True) / nodes
    return math.inf  # no random failures (a deterministic failure_times_s schedule, or none at all)


def _checkpoint_times(checkpoint_s, reload_s, checkpoint_bytes, write_bps, read_bps, cluster) -> tuple[float, float]:
    if checkpoint_s is not None:
        save = _seconds("checkpoint_s", checkpoint_s)
        return save, save if reload_s is None else _seconds("reload_s", reload_s)
    if checkpoint_bytes is None:
        raise _bad("checkpoint_s", "give checkpoint_s= or checkpoint_bytes= (see checkpoint_bytes_of)")
    size = _seconds("checkpoint_bytes", checkpoint_bytes)
    if write_bps is None:
        per_node = None if cluster is None else cluster.node.host.network_storage_bandwidth_bytes_per_s
        if per_node is None:
            raise _bad("storage_write_bytes_per_s", "the cluster spec has no host.network_storage_bandwidth_"
                       "bytes_per_s; give the storage write bandwidth (aggregate, bytes/s)")
        write_bps = per_node.value * cluster.nodes_count  # every node writes its shards at once
    write = _seconds("storage_write_bytes_per_s", write_bps, positive=True)
    read = write if read_bps is None else _seconds("storage_read_bytes_per_s", read_bps, positive=True)
    return size / write, size / read if reload_s is None else _seconds("reload_s", reload_s)


def plan_run(step, cluster=None, *, restart_s: float, tokens: float | None = None, steps: int | None = None,
             tokens_per_step: float | None = None, devices: int | None = None,
             mtbf_device_s: float | None = None, mtbf_node_s: float | None = None,
             failure_times_s=None, checkpoint_s: float | None = None, reload_s: float | None = None,
             checkpoint_bytes: float | None = None, storage_write_bytes_per_s: float | None = None,
             storage_read_bytes_per_s: float | None = None, variability: Variability | None = None) -> RunPlan:
    """Resolve the inputs of :func:`simulate_run` (same keywords) into a :class:`RunPlan`."""
    base, n_dev, tps = _step_inputs(step, cluster, devices, tokens_per_step)
    n_steps = _steps_count(tokens, steps, tps)
    mtbf = _job_mtbf(mtbf_device_s, mtbf_node_s, failure_times_s, n_dev, cluster)
    save, reload = _checkpoint_times(checkpoint_s, reload_s, checkpoint_bytes, storage_write_bytes_per_s,
                                     storage_read_bytes_per_s, cluster)
    schedule = None
    if failure_times_s is not None:
        schedule = tuple(sorted(_seconds("failure_times_s", t) for t in failure_times_s))
    if variability is not None and not variability.trivial and n_steps > _MAX_VARIABLE_STEPS:
        raise _bad("variability", f"per-step draws for {n_steps:,} steps exceed {_MAX_VARIABLE_STEPS:,}")
    return RunPlan(n_steps, base, n_dev, tps, mtbf, save, reload, _seconds("restart_s", restart_s),
                   schedule, variability)


# --- the simulation ----------------------------------------------------------------------------------
def _work_clock(plan: RunPlan, rng: np.random.Generator) -> np.ndarray | None:
    """Cumulative compute seconds before each step (length steps + 1), or None when every step
    takes exactly the base time."""
    var = plan.variability
    if var is None or var.trivial:
        return None
    factors = sample_step_factors(var, plan.devices, plan.steps, rng)
    return np.concatenate(([0.0], np.cumsum(factors * plan.base_step_s)))


def _segments(plan: RunPlan, k: int, clock: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(last step, compute seconds, save seconds) of each segment; a save follows every K-th step."""
    segments = -(-plan.steps // k)
    if segments > _MAX_SEGMENTS:  # three float arrays of this length: refuse rather than allocate without bound
        raise _bad("checkpoint_interval_steps", f"{plan.steps:,} steps saved every {k:,} make {segments:,} "
                   f"segments, more than {_MAX_SEGMENTS:,}: checkpoint less often or simulate fewer steps")
    starts = np.arange(0, plan.steps, k)
    ends = np.minimum(starts + k, plan.steps)
    work = (ends - starts) * plan.base_step_s if clock is None else clock[ends] - clock[starts]
    save = np.where(ends % k == 0, plan.checkpoint_s, 0.0)
    return ends, work, save


def _failure_times(plan: RunPlan, rng: np.random.Generator) -> Iterator[float]:
    if plan.failure_times_s is not None:
        yield from plan.failure_times_s
        return
    if math.isinf(plan.job_mtbf_s):
        return
    t = 0.0
    while True:  # drawn in blocks: the same seed gives the same times whatever the run consumes
        for gap in rng.exponential(plan.job_mtbf_s, 1024):
            t += gap
            yield t


class _Run:
    def __init__(self, plan: RunPlan, ends: np.ndarray, work: np.ndarray, save: np.ndarray, record: bool) -> None:
        self.env, self.plan, self.ends, self.save, self.record = simpy.Environment(), plan, ends, save, record
        self.cum = np.concatenate(([0.0], np.cumsum(work + save)))
        self.k, self.failures, self.lost_s, self.restart_s = 0, 0, 0.0, 0.0
        self.events: list[RunEvent] = []

    def _step(self) -> int:
        return int(self.ends[self.k - 1]) if self.k else 0

    def _commit(self, j: int, start: float, base: float) -> None:
        if self.record:
            self.events += [RunEvent(start + float(self.cum[i + 1]) - base, "checkpoint", int(self.ends[i]))
                            for i in range(self.k, j) if self.save[i] > 0]
        self.k = j

    def trainer(self):
        n = len(self.cum) - 1
        while self.k < n:
            start, base = self.env.now, float(self.cum[self.k])
            try:
                yield self.env.timeout(float(self.cum[n]) - base)
                self._commit(n, start, base)
            except simpy.Interrupt:
                reached = base + (self.env.now - start)
                j = max(self.k, int(np.searchsorted(self.cum, reached, side="right")) - 1)
                self._commit(j, start, base)
                self.lost_s += reached - float(self.cum[j])
                yield from self._recover()
        if self.record:
            self.events.append(RunEvent(self.env.now, "done", self._step()))

    def _recover(self):
        while True:
            self.failures += 1
            if self.record:
                self.events.append(RunEvent(self.env.now, "failure", self._step()))
            t0 = self.env.now
            try:
                yield self.env.timeout(self.plan.recovery_s)
                self.restart_s += self.plan.recovery_s
                if self.record:
                    self.events.append(RunEvent(self.env.now, "restarted", self._step()))
                return
            except simpy.Interrupt:  # failed again while restarting: the restart starts over
                self.restart_s += self.env.now - t0

    def failer(self, trainer, times: Iterator[float]):
        for t in times:
            yield self.env.timeout(max(0.0, t - self.env.now))
            if not trainer.is_alive:
                return
            trainer.interrupt()

    def play(self, times: Iterator[float]) -> float:
        trainer = self.env.process(self.trainer())
        self.env.process(self.failer(trainer, times))
        self.env.run(until=trainer)
        return self.env.now


def _rngs(seed: int) -> tuple[np.random.Generator, np.random.Generator]:
    """Independent streams for failures and step variability, so changing one leaves the other."""
    fail, var = np.random.SeedSequence(seed).spawn(2)
    return np.random.default_rng(fail), np.random.default_rng(var)


def _play(plan: RunPlan, k: int, clock, fail_rng, record: bool) -> tuple[_Run, float, np.ndarray, np.ndarray]:
    ends, work, save = _segments(plan, k, clock)
    run = _Run(plan, ends, work, save, record)
    return run, run.play(_failure_times(plan, fail_rng)), work, save


def simulate_run(step, cluster=None, *, restart_s: float, checkpoint_interval_steps: int | None = None,
                 seed: int = 0, record_events: bool = False, **inputs) -> RunResult:
    """A long run of ``step`` (a StepReport, or seconds per step) with failures, checkpoints,
    restarts and stragglers → :class:`RunResult` (goodput, lost time by cause, time to train).

    Inputs (keywords, see :func:`plan_run`): ``tokens=`` or ``steps=``; ``mtbf_device_s=`` or
    ``mtbf_node_s=`` (exponential, job MTBF = MTBF / count) or ``failure_times_s=`` (a fixed
    schedule of wall-clock failure times); ``checkpoint_s=`` or ``checkpoint_bytes=`` with
    ``storage_write_bytes_per_s=`` (default: the cluster's per-node network storage bandwidth × nodes);
    ``reload_s=`` / ``storage_read_bytes_per_s=`` (default: the write rate); ``variability=``.
    ``checkpoint_interval_steps=None`` takes Daly's interval. Same seed, same result."""
    plan = plan_run(step, cluster, restart_s=restart_s, **inputs)
    k = checkpoint_interval_steps
    if k is None:
        k = plan.interval_steps(daly_interval_s(plan.checkpoint_s, plan.job_mtbf_s))
    elif isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise _bad("checkpoint_interval_steps", f"must be a positive integer, got {k!r}")
    fail_rng, var_rng = _rngs(seed)
    clock = _work_clock(plan, var_rng)
    run, wall, work, save = _play(plan, k, clock, fail_rng, record_events)
    useful = plan.steps * plan.base_step_s
    lost = {"checkpoint": float(save.sum()), "restart": run.restart_s, "recompute": run.lost_s,
            "straggler": 0.0 if clock is None else float(work.sum()) - useful}
    return RunResult(plan=plan, checkpoint_interval_steps=int(k), wall_s=wall, useful_s=useful,
                     lost_s=MappingProxyType(lost), failures_count=run.failures,
                     checkpoints_count=int(np.count_nonzero(save)), events=tuple(run.events), seed=seed)


def scan_checkpoint_intervals(step, cluster=None, *, restart_s: float, factors=None, replicas: int = 8,
                              seed: int = 0, **inputs) -> IntervalScan:
    """Simulated goodput over checkpoint intervals around Daly's (``factors`` × Daly, default ¼ … 4
    in 17 geometric steps, plus Young's and Daly's own), each the mean of ``replicas`` seeds; every
    interval sees the same failure times and step draws per seed (common random numbers)."""
    plan = plan_run(step, cluster, restart_s=restart_s, **inputs)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise _bad("replicas", f"must be a positive integer, got {replicas!r}")
    daly_k = plan.interval_steps(daly_interval_s(plan.checkpoint_s, plan.job_mtbf_s))
    young_k = plan.interval_steps(young_interval_s(plan.checkpoint_s, plan.job_mtbf_s))
    factors = np.geomspace(0.25, 4.0, 17) if factors is None else np.asarray(factors, dtype=float)
    if factors.ndim != 1 or factors.size == 0 or not np.all(np.isfinite(factors) & (factors > 0)):
        raise _bad("factors", "must be a non-empty list of positive multiples of Daly's interval")
    grid = sorted({daly_k, young_k} | {plan.interval_steps(f * daly_k * plan.expected_step_s) for f in factors})
    useful = plan.steps * plan.base_step_s
    totals = np.zeros(len(grid))
    for r in range(replicas):
        _, var_rng = _rngs(seed + r)
        clock = _work_clock(plan, var_rng)
        for i, k in enumerate(grid):
            fail_rng, _ = _rngs(seed + r)
            totals[i] += useful / _play(plan, k, clock, fail_rng, False)[1]
    goodput = tuple(float(g) for g in totals / replicas)
    return IntervalScan(plan=plan, intervals_steps=tuple(grid), goodput=goodput, daly_interval_steps=daly_k,
                        young_interval_steps=young_k, replicas=replicas, seed=seed)
