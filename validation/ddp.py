"""Data parallelism for real: DistributedDataParallel over gloo, 2 processes of 1 thread each on this
machine, versus simtrain's dp = 2 prediction.

Measured, per model (rank 0's medians; every sample starts at a barrier so both ranks start together;
the two steps' samples alternate):

* ``overlap``   — DDP as shipped: gradients all-reduced in buckets (25 MiB) while backward runs;
* ``no_overlap`` — ``ddp.no_sync()`` for forward + backward, then one all-reduce of the gradients
  copied (÷ world size) into a flat buffer kept from step to step, copied back, and the optimizer
  step: communication strictly after backward, with DDP's own gradient copies (``_FlatSync``);
* ``allreduce`` — that all-reduce alone (after a barrier), the number the prediction's dp collective
  is compared with;
* for attributing the step error (reported in each case's detail): rank 0's local step alone (no
  DDP; rank 1 idle) and both ranks' local steps at once without communication — the difference is
  what two processes sharing one CPU's cores, caches and memory bandwidth cost, which a cluster of
  independent devices does not have.

Predicted: ``st.estimate`` on a one-node cluster of two calibrated 1-thread devices (measured with a
neighbour process running the same benches on the other core, ``st.measure(colocated=2)``: what a
rank's core delivers while the other rank computes; the same calibration's lockstep ranks measure
how long a step waits for the slower rank, ``Efficiency.rank_jitter_sigma``) joined by the
calibrated gloo link (:func:`simtrain.calibrate.fit.profile_link`) on a plain switch fabric, with
``TrainConfig(dp=2, dp_overlap=True | False, dp_bucket_bytes=BUCKET_BYTES)``; the per-rank micro-batch
is the per-process batch. Buckets are 2 MiB on both sides (``DDP(bucket_cap_mb=2)``) so the models'
10 MiB of gradients make several buckets and overlap has something to hide (at DDP's default 25 MiB
they are one bucket and nothing overlaps).
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass

import simtrain as st
from simtrain.cost.realisation import cpu_comm_compute_slowdown
from simtrain.specs.base import Sourced
from simtrain.specs.hardware import Cluster, Fabric, Host, Network, Node
from simtrain.specs.stack import Stack, load_stack
from validation.report import Case

__all__ = ["DdpTimes", "measure_ddp", "colocated_ranks", "dp_cluster", "gloo_stack", "predict_ddp", "ddp_cases", "attribution_markdown", "WORLD",
           "BUCKET_BYTES"]

WORLD = 2
THREADS_PER_RANK = 1
"""torch threads of each rank's compute (``_rank_main``)."""
BUCKET_BYTES = 2 * 2**20


@dataclass(frozen=True)
class DdpTimes:
    overlap_s: float
    no_overlap_s: float
    allreduce_s: float
    grad_bytes: int
    per_rank_batch: int
    alone_s: float = float("nan")
    """Rank 0's local step (no DDP, no communication) while rank 1 idles: the 1-thread device alone."""
    concurrent_s: float = float("nan")
    """Both ranks' local steps at the same time, no communication: what sharing the CPU costs."""


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def _timed(fn, warmup: int, repeats: int) -> float:
    return _timed_alternately((fn,), warmup, repeats)[0]


def _timed_alternately(fns, warmup: int, repeats: int) -> list[float]:
    """Median of each of ``fns``, their samples taken in turn (one of each per repeat, each after a
    barrier), so a change of machine speed during the timing moves all of them alike. Timed one
    block after the other, overlapped DDP came out 10-15 % slower than the no-overlap step in three of
    four models (run 18); alternated on the same machine it is 5-9 % faster (docs/own-device.md)."""
    import torch.distributed as dist
    for fn in fns:
        for _ in range(warmup):
            fn()
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, out in zip(fns, samples, strict=True):
            dist.barrier()
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
    return [_median(x) for x in samples]


class _FlatSync:
    """The no-overlap gradient sync done as DDP's reducer does it, after the backward: one flat
    buffer allocated once; each gradient copied into it scaled by 1/world (``aten::mul`` into its
    view), one all-reduce, each copied back (``aten::copy_``) — the same four gradient passes as the
    overlapped DDP step (``Stack.dp_grad_copy_passes``), none of them into fresh memory. (Flattening
    into a new buffer every step, as this harness did through run 16, faulted its pages in each time:
    ``aten::cat`` took 6.2 ms a step for the MLP's 11 MiB, a cost of the harness, not of DDP.)"""

    def __init__(self, params, world: int):
        import torch
        self.params, self.scale = params, 1.0 / world
        self.flat = torch.zeros(sum(p.numel() for p in params))
        self.views, start = [], 0
        for p in params:
            self.views.append(self.flat[start:start + p.numel()].view_as(p))
            start += p.numel()

    def __call__(self) -> None:
        import torch
        import torch.distributed as dist
        with torch.no_grad():
            for p, view in zip(self.params, self.views, strict=True):
                torch.mul(p.grad, self.scale, out=view)
            dist.all_reduce(self.flat)
            for p, view in zip(self.params, self.views, strict=True):
                p.grad.copy_(view)


def _one_model(name: str, size: str, per_rank_batch: int, rank: int, warmup: int, repeats: int) -> DdpTimes:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from validation.steps import make_optimizer
    from validation.workloads import workloads
    w = workloads(size, (name,))[0]
    module, _, _ = w.build("cpu", seed=0)
    inputs, loss_fn = w.make_batch(per_rank_batch, 100 + rank)  # each rank its own data
    ddp = DDP(module, bucket_cap_mb=BUCKET_BYTES / 2**20)
    params = [p for p in ddp.parameters() if p.requires_grad]
    opt = make_optimizer(w.optimizer, params, "cpu")

    def local() -> None:
        opt.zero_grad(set_to_none=True)
        loss_fn(module(*inputs)).backward()
        opt.step()

    t_alone = _alone(local, rank, warmup, repeats)
    t_conc = _timed(local, warmup, repeats)

    def overlapped() -> None:
        opt.zero_grad(set_to_none=True)
        loss_fn(ddp(*inputs)).backward()
        opt.step()

    sync = _FlatSync(params, WORLD)

    def sequential() -> None:
        opt.zero_grad(set_to_none=True)
        with ddp.no_sync():
            loss_fn(ddp(*inputs)).backward()
        sync()
        opt.step()
    t_overlap, t_seq = _timed_alternately((overlapped, sequential), warmup, repeats)
    flat = torch.zeros(sum(p.numel() for p in params))
    t_ar = _timed(lambda: dist.all_reduce(flat), warmup, repeats)
    return DdpTimes(t_overlap, t_seq, t_ar, int(flat.numel() * 4), per_rank_batch, t_alone, t_conc)


def _alone(fn, rank: int, warmup: int, repeats: int) -> float:
    """Median of ``fn`` on rank 0 while the other ranks wait at a barrier (nan on them)."""
    import torch.distributed as dist
    t = float("nan")
    if rank == 0:
        for _ in range(warmup):
            fn()
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
        t = _median(samples)
    dist.barrier()
    return t


def _rank_main(rank: int, jobs: list[tuple[str, str, int]], warmup: int, repeats: int, init: str, out) -> None:
    import torch
    import torch.distributed as dist
    torch.set_num_threads(THREADS_PER_RANK)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=WORLD)
    try:
        for name, size, batch in jobs:
            times = _one_model(name, size, batch, rank, warmup, repeats)
            if rank == 0:
                out.put(times)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _collect(queue, procs, count: int) -> list[DdpTimes]:
    """``count`` results from rank 0, failing fast when a rank dies (a dead rank would hang the other)."""
    import queue as q
    results: list[DdpTimes] = []
    while len(results) < count:
        try:
            results.append(queue.get(timeout=1.0))
        except q.Empty:
            dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if dead:
                for p in procs:
                    p.kill()
                raise RuntimeError(f"a DDP rank exited with {dead} before reporting") from None
    return results


def measure_ddp(jobs: list[tuple[str, str, int]], warmup: int, repeats: int) -> list[DdpTimes]:
    """Run the three measurements of every (zoo name, size, per-rank batch) in one pair of spawned
    processes; rank 0's medians, in order."""
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        procs = [ctx.Process(target=_rank_main, args=(r, list(jobs), warmup, repeats, f"file://{tmp}/store", queue))
                 for r in range(WORLD)]
        for p in procs:
            p.start()
        try:
            results = _collect(queue, procs, len(jobs))
        finally:
            for p in procs:
                p.join(timeout=60)
                if p.is_alive():
                    p.kill()
    # every result arrived: both ranks finished every collective of every job. A rank that then dies
    # in gloo's teardown (seen once as SIGABRT under a loaded test run) has lost nothing; one that died
    # earlier made _collect raise.
    return results


def colocated_ranks() -> int:
    """Ranks sharing this host's cores while the DDP step runs: ``WORLD``, at most one per core."""
    import os
    return max(1, min(WORLD, (os.cpu_count() or 1) // THREADS_PER_RANK))


def dp_cluster(device, link, cores: int) -> Cluster:
    """One node: ``WORLD`` ``device``s on a plain switch fabric of the calibrated ``link``."""
    src = "validation: this machine's CPU shared by the DDP ranks"
    host = Host(cpu_cores=Sourced[int](value=cores, source=src, mark="D"),
                dram_bandwidth_bytes_per_s=Sourced[float](value=device.memory_bandwidth_bytes_per_s, source=src,
                                                          mark="D"))
    node = Node(name=f"{device.name[:40]}-x{WORLD}", device=device, devices_count=WORLD,
                fabric=Fabric(topology="pcie_tree", link=link), host=host)
    return Cluster(name=f"{node.name}-cluster", node=node, nodes_count=1, network=Network(topology="none"))


def gloo_stack(cluster: Cluster) -> Stack:
    """The reference stack with the collectives' share of the ranks' cores: ``WORLD`` ranks of
    ``THREADS_PER_RANK`` compute threads on the host's cores (``cpu_comm_compute_slowdown``), and
    DDP's copies of the gradients into and out of its buckets (the ``ddp`` preset's
    ``dp_grad_copy_passes``)."""
    cores = cluster.node.host.cpu_cores.value
    slow = cpu_comm_compute_slowdown(cores, WORLD, THREADS_PER_RANK)
    copies = load_stack("ddp").dp_grad_copy_passes  # torch DDP's bucket copies (gradient_as_bucket_view=False)
    return load_stack("reference").model_copy(update={
        "name": "reference-gloo-cpu", "comm_compute_slowdown": slow, "dp_grad_copy_passes": copies,
        "source": f"reference; comm_compute_slowdown: {WORLD} ranks x {THREADS_PER_RANK} threads on {cores} cores; "
                  f"dp_grad_copy_passes from the ddp preset"})


def predict_ddp(model, cluster: Cluster, per_rank_batch: int, optimizer: str, overlap: bool,
                engine: str = "estimate") -> st.StepReport:
    """The closed form (``engine="estimate"``) or the simulator with the two ranks' gradient buckets
    sharing the gloo link as events (``"simulate"``, contention on) — issue 13 reports both."""
    from validation.steps import train_config
    cfg = train_config(WORLD * per_rank_batch, optimizer, micro_batch_size=per_rank_batch, dp=WORLD,
                       dp_overlap=overlap, dp_bucket_bytes=BUCKET_BYTES, stack=gloo_stack(cluster))
    if engine == "simulate":
        return st.simulate(model, cluster, cfg, contention=True)
    return st.estimate(model, cluster, cfg)


def _jitter_sigma(cluster: Cluster) -> float:
    from simtrain.cost.compute import device_efficiency
    return device_efficiency(cluster.node.device).rank_jitter_sigma


def _dp_comm_s(report: st.StepReport) -> float:
    return sum(c.total_s for c in report.comm if c.axis == "dp")


def ddp_cases(w, model, cluster: Cluster, times: DdpTimes) -> list[Case]:
    """Step with / without overlap and the all-reduce, predicted vs measured."""
    out = []
    reports = {}
    for overlap, measured in ((True, times.overlap_s), (False, times.no_overlap_s)):
        r = reports[overlap] = predict_ddp(model, cluster, times.per_rank_batch, w.optimizer, overlap)
        sim = predict_ddp(model, cluster, times.per_rank_batch, w.optimizer, overlap, engine="simulate")
        tag = "overlap" if overlap else "no_overlap"
        out.append(Case(f"{w.name}/{w.size} dp2 b{times.per_rank_batch} {tag}", "ddp_step", r.step_time_s, measured,
                        detail={"breakdown_s": dict(r.time_breakdown_s), "dp_comm_s": _dp_comm_s(r),
                                "sync_wait_s": r.sync_wait_s, "rank_jitter_sigma": _jitter_sigma(cluster),
                                "simulated_s": sim.step_time_s,
                                "feasible": r.feasible, "reasons": list(r.reasons),
                                "measured_rank_alone_s": times.alone_s,
                                "measured_ranks_concurrent_no_comm_s": times.concurrent_s}))
    r = reports[False]
    out.append(Case(f"{w.name}/{w.size} dp2 allreduce {times.grad_bytes / 2**20:.1f} MiB", "allreduce",
                    _dp_comm_s(r), times.allreduce_s, detail={"grad_bytes": times.grad_bytes}))
    return out


def attribution_markdown(cases: list[Case]) -> list[str]:
    """Where the DDP step error comes from: predicted local work vs one rank alone vs both ranks at once
    (no communication), then the communication the prediction adds and the measured DDP steps."""
    lines = ["Milliseconds per step. 'local' = forward + backward + optimizer of one rank.", "",
             "| model | predicted local | measured: rank alone | measured: both ranks, no comm | "
             "predicted exposed comm (of it: wait for the slower rank) | predicted step | simulated step | "
             "measured DDP (overlap / no overlap) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    steps = [c for c in cases if c.metric == "ddp_step"]
    for c in steps:
        if not c.case.endswith(" overlap") or c.case.endswith("no_overlap"):
            continue
        other = next((d for d in steps if d.case == c.case[: -len("overlap")] + "no_overlap"), None)
        b = c.detail.get("breakdown_s", {})
        local = b.get("compute", 0.0) + b.get("optimizer", 0.0)
        lines.append(f"| {c.case.rsplit(' ', 1)[0]} | {local * 1e3:.1f} | {c.detail['measured_rank_alone_s'] * 1e3:.1f} "
                     f"| {c.detail['measured_ranks_concurrent_no_comm_s'] * 1e3:.1f} | {b.get('comm_exposed', 0.0) * 1e3:.1f} "
                     f"({c.detail.get('sync_wait_s', 0.0) * 1e3:.1f}) "
                     f"| {c.predicted * 1e3:.1f} | {c.detail.get('simulated_s', float('nan')) * 1e3:.1f} "
                     f"| {c.measured * 1e3:.1f} / "
                     f"{other.measured * 1e3 if other else float('nan'):.1f} |")
    sims = [c for c in steps if "simulated_s" in c.detail]
    if sims:
        def mape(pred) -> float:
            return 100 * sum(abs(pred(c) / c.measured - 1) for c in sims) / len(sims)
        lines += ["", f"DDP step MAPE over {len(sims)} cases: closed form {mape(lambda c: c.predicted):.1f} %, "
                  f"simulator (gradient buckets as events on the shared gloo link) "
                  f"{mape(lambda c: c.detail['simulated_s']):.1f} %. Neither models the two ranks sharing one "
                  "CPU's cores with the gloo threads (the 'both ranks, no comm' column)."]
        sigma = sims[0].detail.get("rank_jitter_sigma")
        if sigma is not None:
            from simtrain.cost.variability import sync_wait_seconds
            lines[-1] += (f" The wait for the slower rank comes from the calibration's lockstep ranks "
                          f"(calibrate/collectives_bench.py): rank_jitter_sigma {sigma:.3f}, a step waiting "
                          f"{100 * sync_wait_seconds(1.0, WORLD, sigma):.1f} % of a rank's forward + backward.")
    return lines
