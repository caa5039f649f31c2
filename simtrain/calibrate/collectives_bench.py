"""Benches of several processes: collectives through torch.distributed, and the wait of ranks sharing a host
for the slowest of them; each rank a child interpreter (``python -m simtrain.calibrate.collectives_bench
collective|jitter …``).

Collective microbenchmarks through torch.distributed: gloo with 2–4 processes on CPU, NCCL with one
process per GPU on CUDA, over a message-size grid.

Message size follows the nccl-tests convention (NVIDIA nccl-tests, doc/PERFORMANCE.md): the size of the
largest buffer of the call — all_reduce and broadcast: the buffer; all_gather: the gathered output;
reduce_scatter: the full input. Each sample is a barrier followed by ``inner`` back-to-back calls; a
sample's time is the **slowest rank's** (a collective is done when every rank is done). ``inner`` is
agreed across ranks (max of the ranks' one-call estimates) so every rank issues the same calls.
Calls a backend refuses (gloo's missing reduce_scatter on some versions) come back as
:class:`~simtrain.calibrate.records.Unsupported`, never as a time.

Each rank is its own interpreter, ``python -m simtrain.calibrate.collectives_bench collective`` started by
``subprocess`` (see "Child processes" below for why not ``multiprocessing`` spawn): ``st.measure`` then works
from a plain script without a ``__main__`` guard and from a notebook.

A rank of either bench is its own interpreter: ``python -m simtrain.calibrate.collectives_bench collective
JOB RANK`` (one collective-benchmark rank: :func:`worker_main`) or ``… jitter THREADS`` (one rank of the
lockstep bench: :func:`jitter_main`).

Why a module run by ``subprocess`` and not ``multiprocessing`` spawn: spawn re-imports the caller's
``__main__`` in every child, so ``st.measure`` called at the top level of a plain script (no
``if __name__ == "__main__":`` guard) re-runs the script in each child and crashes, and in a notebook
``__main__`` has no file to re-import. A child started as ``python -m simtrain.calibrate.collectives_bench`` imports
only simtrain, whatever the parent is.

``JOB`` is a JSON file written by :func:`simtrain.calibrate.collectives_bench.run_collectives`:
``{"world", "backend", "device", "init_file", "out", "job"}``; ``RANK`` the rank of this process.

The ranks' lockstep jitter is in :mod:`simtrain.calibrate.bench_rank_jitter` (its names re-exported
here; its ranks run through this module's ``main``), the children's environment in
:mod:`simtrain.calibrate.child_env`.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from simtrain.calibrate.bench_grids import Grid
from simtrain.calibrate.bench_rank_jitter import (  # noqa: F401  (re-exported)
    BENCH,
    JITTER_MODULE,
    ROUNDS,
    bench_rank_jitter,
    fit_rank_jitter,
    jitter_main,
    jitter_rows,
)
from simtrain.calibrate.child_env import child_env
from simtrain.calibrate.records import Row, Unsupported
from simtrain.calibrate.timing import TimingPlan
from simtrain.errors import SimtrainError
from simtrain.glossary import DType

__all__ = ["run_collectives", "collective_backends", "rank_main", "BENCH", "ROUNDS", "JITTER_MODULE",
           "bench_rank_jitter", "jitter_rows", "fit_rank_jitter", "CHILD_MODULE",
           "jitter_main", "worker_main", "main"]


# ──── Collectives ─────────────────────────────────────────────────────────────────────────────────────

_JOIN_TIMEOUT_S = 300.0
CHILD_MODULE = "simtrain.calibrate.collectives_bench"
"""The module each collective rank runs (``python -m``)."""


def _call(op: str, world: int, numel: int, device: str):
    """A zero-argument closure issuing one collective on message-sized fp32 buffers."""
    import torch
    import torch.distributed as dist
    per_rank = max(1, numel // world)
    if op == "all_reduce":
        x = torch.ones(numel, device=device)
        return lambda: dist.all_reduce(x)
    if op == "broadcast":
        x = torch.ones(numel, device=device)
        return lambda: dist.broadcast(x, src=0)
    if op == "all_gather":
        x, out = torch.ones(per_rank, device=device), torch.empty(per_rank * world, device=device)
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        return lambda: gather(out, x)
    if op == "reduce_scatter":
        x, out = torch.ones(per_rank * world, device=device), torch.empty(per_rank, device=device)
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        return lambda: scatter(out, x)
    raise ValueError(f"unknown collective {op!r}")


def _sync(device: str) -> None:
    if device == "cuda":
        import torch
        torch.cuda.synchronize()


def _agreed_inner(fn, plan: TimingPlan, device: str) -> int:
    """Same inner-loop count on every rank: ceil(min_sample_s / slowest one-call time)."""
    import torch
    import torch.distributed as dist
    start = time.perf_counter()
    fn()
    _sync(device)
    t1 = torch.tensor([max(time.perf_counter() - start, 1e-7)], dtype=torch.float64, device=device)
    dist.all_reduce(t1, op=dist.ReduceOp.MAX)
    return int(min(plan.max_inner, max(1, math.ceil(plan.min_sample_s / float(t1.item())))))


def _time_collective(fn, plan: TimingPlan, device: str) -> list[float]:
    import torch.distributed as dist
    for _ in range(plan.warmup):
        fn()
    _sync(device)
    inner = _agreed_inner(fn, plan, device)
    samples = []
    for _ in range(plan.repeats):
        dist.barrier()
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        _sync(device)
        samples.append((time.perf_counter() - start) / inner)
    return samples


def rank_main(rank: int, world: int, backend: str, device: str, init_file: str, job: dict, out: str) -> None:
    """One rank: run every (op, size), gather every rank's samples, rank 0 writes the JSON result."""
    import torch
    import torch.distributed as dist
    torch.set_num_threads(job["threads"])
    if device == "cuda":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world)
    plan = TimingPlan(**job["plan"])
    results, refused = {}, {}
    for op in job["ops"]:
        for nbytes in job["sizes"]:
            key = f"{op}:{nbytes}"
            try:
                results[key] = _time_collective(_call(op, world, max(1, nbytes // 4), device), plan, device)
            except (RuntimeError, NotImplementedError, ValueError) as err:
                refused[key] = str(err).splitlines()[0][:200] if str(err) else type(err).__name__
                dist.barrier()
    gathered: list = [None] * world
    dist.all_gather_object(gathered, results)
    if rank == 0:
        Path(out).write_text(json.dumps({"ranks": gathered, "refused": refused}))
    dist.barrier()
    dist.destroy_process_group()




def _wait_all(procs: list[subprocess.Popen], logs: list[Path], what: str) -> None:
    """Wait for every rank; on a timeout or a failed rank stop our own children (by handle) and raise."""
    deadline = time.monotonic() + _JOIN_TIMEOUT_S
    try:
        for p in procs:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        raise SimtrainError(f"{what} did not finish in {_JOIN_TIMEOUT_S:.0f} s") from None
    failed = [(r, p.returncode) for r, p in enumerate(procs) if p.returncode != 0]
    if failed:
        for p in procs:
            p.kill() if p.poll() is None else None
        rank, code = failed[0]
        tail = logs[rank].read_text(errors="replace").strip().splitlines()[-5:]
        raise SimtrainError(f"{what}: rank {rank} exited with status {code}: " + " | ".join(tail))


def _spawn(world: int, backend: str, device: str, job: dict) -> dict:
    """Run ``world`` ranks as ``python -m simtrain.calibrate.collectives_bench collective`` children; rank 0's
    JSON result."""
    with tempfile.TemporaryDirectory(prefix="simtrain-coll-") as tmp:
        init_file, out = os.path.join(tmp, "init"), os.path.join(tmp, "result.json")
        spec = Path(tmp) / "job.json"
        spec.write_text(json.dumps({"world": world, "backend": backend, "device": device,
                                    "init_file": init_file, "out": out, "job": job}))
        logs = [Path(tmp) / f"rank{r}.log" for r in range(world)]
        procs = []
        for r in range(world):
            with open(logs[r], "wb") as log:
                procs.append(subprocess.Popen([sys.executable, "-m", CHILD_MODULE, "collective", str(spec), str(r)],
                                              stdout=log, stderr=subprocess.STDOUT, env=child_env()))
        _wait_all(procs, logs, f"{backend} collectives with {world} ranks")
        return json.loads(Path(out).read_text())


def _stats(per_rank: list[list[float]]) -> tuple[float, float, float, int]:
    import numpy as np
    slowest = np.max(np.asarray(per_rank), axis=0)
    p10, med, p90 = (float(v) for v in np.percentile(slowest, [10, 50, 90]))
    return med, min(p10, med), max(p90, med), int(slowest.size)


def collective_backends(device: str) -> list[tuple[str, str, tuple[int, ...]]]:
    """(backend, tensor device, world sizes available) for this device kind."""
    import torch
    import torch.distributed as dist
    if device == "cuda":
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if n >= 2 and dist.is_nccl_available():
            return [("nccl", "cuda", tuple(sorted({2, n})))]
        return []
    return [("gloo", "cpu", ())] if dist.is_gloo_available() else []


def run_collectives(device: str, grid: Grid, threads: int = 1) -> tuple[list[Row], list[Unsupported]]:
    """Every collective of ``grid`` at every message size and world size, on every backend available."""
    rows: list[Row] = []
    refused: list[Unsupported] = []
    plan = asdict(grid.plan)
    for backend, tensor_device, worlds in collective_backends(device):
        for world in worlds or grid.collective_world_sizes:
            job = {"ops": list(grid.collective_ops), "sizes": list(grid.collective_bytes), "plan": plan,
                   "threads": threads}
            res = _spawn(world, backend, tensor_device, job)
            base = {"backend": backend, "world_size": world, "threads_per_rank": threads}
            for key, reason in res["refused"].items():
                op, nbytes = key.split(":")
                refused.append(Unsupported(op, dict(base, message_bytes=int(nbytes)), reason))
            for key in res["ranks"][0]:
                op, nbytes = key.split(":")
                med, p10, p90, n = _stats([r[key] for r in res["ranks"]])
                rows.append(Row(bench=op, op_class=None, dtype=DType.FP32,
                                params=dict(base, message_bytes=int(nbytes)), flops=0.0,
                                bytes_moved=float(nbytes), median_s=med, p10_s=p10, p90_s=p90,
                                repeats=n, device=tensor_device))
    return rows, refused


# ──── Child processes ─────────────────────────────────────────────────────────────────────────────────

def worker_main(argv: list[str] | None = None) -> int:
    """One collective-benchmark rank: ``JOB`` the job file :func:`_spawn` wrote, ``RANK`` its rank."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m simtrain.calibrate.collectives_bench collective JOB.json RANK", file=sys.stderr)
        return 2
    spec = json.loads(Path(args[0]).read_text())
    rank_main(int(args[1]), int(spec["world"]), spec["backend"], spec["device"], spec["init_file"],
              spec["job"], spec["out"])
    return 0


def main(argv: list[str] | None = None) -> int:
    """``collective JOB RANK`` (:func:`worker_main`) or ``jitter THREADS`` (:func:`jitter_main`)."""
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "collective":
        return worker_main(args[1:])
    if args and args[0] == "jitter":
        return jitter_main(args[1:])
    print("usage: python -m simtrain.calibrate.collectives_bench collective JOB.json RANK | jitter THREADS",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
