"""Benches of several processes: collectives through torch.distributed, and the wait of ranks sharing a host
for the slowest of them; each rank a child interpreter (``python -m simtrain.calibrate.collectives_bench
collective|jitter …``).

Collectives
-----------

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

Rank jitter
-----------

How long the ranks of a job sharing this host wait for the slowest of them at each sync (CPU).

A synchronous data-parallel step ends with a gradient all-reduce that no rank can leave before the
slowest has joined, so a step lasts as long as its slowest rank's forward and backward. The same
work on the same core does not take the same time twice: on this project's 2-core EPYC VM, two DDP
ranks of the validation zoo, each timed per step with a barrier before its all-reduce
(2026-12-04), gave per-step means of each rank's forward + backward, and of the slower of the two:

| model | a rank's fw + bw (mean) | the slower rank's | wait |
|---|---:|---:|---:|
| MLP, 64 / rank | 17.6 ms | 18.6 ms | 5.9 % |
| ResNet-18, 4 / rank | 26.4 ms | 28.1 ms | 6.6 % |
| GPT, 4 / rank | 129.3 ms | 136.5 ms | 5.6 % |

The bench measures that wait without a model: ``ranks`` processes (``python -m
simtrain.calibrate.collectives_bench jitter THREADS``, started by ``subprocess`` so that ``st.measure`` still
works from a plain script) run the same step-scale workload (:func:`_work`: GEMMs and an elementwise
pass over 4 MiB, ~12 ms on one EPYC core) in lockstep: the parent tells every rank to go, each times
its own run, and the next round starts when all have answered — a barrier per round, as the
collective is in a step. Two rows: the mean of every rank's time (``of: each``) and the mean of each
round's slowest (``of: slowest``); their ratio is ``E[max of N ranks] / E[one rank]``. Lockstep
rounds keep what a per-process spread would miss: one rank systematically slower than the other
(its core, its cache neighbours) and the ranks' times moving together.

:func:`fit_rank_jitter` turns the ratio into ``Efficiency.rank_jitter_sigma``, the σ of a lognormal
jitter with mean 1 whose expected maximum over N ranks is that ratio (cost/variability.py), so the
cost layer can price other rank counts too. The ratio of means is insensitive to the machine's
speed drifting over the bench: both rows move with it.

Child processes
---------------

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
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from simtrain.calibrate.bench_grids import Grid
from simtrain.calibrate.records import Row, Unsupported
from simtrain.calibrate.timing import TimingPlan
from simtrain.errors import SimtrainError
from simtrain.glossary import DType

__all__ = ["run_collectives", "collective_backends", "rank_main", "BENCH", "ROUNDS", "JITTER_MODULE",
           "bench_rank_jitter", "jitter_rows", "fit_rank_jitter", "CHILD_MODULE",
           "jitter_main", "worker_main", "main"]


# ──── Collectives ───────────────────────────────────────────────────────────────────────────────────

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


def _child_env() -> dict[str, str]:
    """The parent's environment, with the folder holding this simtrain first on PYTHONPATH (so a child
    imports the same simtrain even when it runs from a checkout that is not installed)."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


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
                                              stdout=log, stderr=subprocess.STDOUT, env=_child_env()))
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


# ──── Rank jitter ───────────────────────────────────────────────────────────────────────────────────

BENCH = "rank_jitter"
ROUNDS = 40
"""Lockstep rounds per pass: ~0.5 s of work per rank at ~12 ms a round."""
JITTER_MODULE = "simtrain.calibrate.collectives_bench"
"""The module each rank runs (``python -m``)."""
_WARMUP = 3
_GEMM = 256
_GEMMS = 30
_RELU_NUMEL = 1 << 20
_RELUS = 8


def _work(a, b, x) -> None:
    """One round: GEMMs (compute-bound) then elementwise passes over 4 MiB (memory-bound), the two
    kinds of work a training step alternates."""
    import torch
    for _ in range(_GEMMS):
        torch.mm(a, b)
    for _ in range(_RELUS):
        torch.relu(x)


def jitter_main(argv: list[str] | None = None) -> int:
    """One rank: ``THREADS`` torch threads; says ``ready`` after its warm-up, then times one round per
    ``go`` line on stdin and answers with the seconds it took, until ``stop`` or end of input."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not args[0].isdigit() or int(args[0]) < 1:
        print("usage: python -m simtrain.calibrate.collectives_bench jitter THREADS", file=sys.stderr)
        return 2
    import torch
    torch.set_num_threads(int(args[0]))
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(_GEMM, _GEMM, generator=g), torch.randn(_GEMM, _GEMM, generator=g)
    x = torch.randn(_RELU_NUMEL, generator=g)
    for _ in range(_WARMUP):
        _work(a, b, x)
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() != "go":
            break
        start = time.perf_counter()
        _work(a, b, x)
        print(repr(time.perf_counter() - start), flush=True)
    return 0


def _lockstep(procs: list[subprocess.Popen], rounds: int) -> list[list[float]]:
    """Per round, every rank's seconds: all are told to go, and the round ends when all have answered."""
    out = []
    for _ in range(rounds):
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        out.append([_answer(p) for p in procs])
    return out


def _answer(p: subprocess.Popen) -> float:
    line = p.stdout.readline()
    if not line:
        raise SimtrainError(f"a rank of the rank-jitter bench exited mid-run (status {p.poll()})")
    return float(line)


def bench_rank_jitter(ranks: int, threads: int, rounds: int = ROUNDS) -> list[Row]:
    """``ranks`` processes of ``threads`` threads in lockstep for ``rounds`` rounds (module docstring)."""
    cmd = [sys.executable, "-m", JITTER_MODULE, "jitter", str(threads)]
    procs = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              env=_child_env(), text=True) for _ in range(ranks)]
    try:
        for p in procs:  # a rank that fails to start closes its output: readline returns ""
            if p.stdout.readline().strip() != "ready":
                p.wait(timeout=30)
                raise SimtrainError(f"a rank of the rank-jitter bench ({' '.join(cmd[1:])}) did not start "
                                    f"(status {p.returncode})")
        per_round = _lockstep(procs, rounds)
        for p in procs:
            p.stdin.write("stop\n")
            p.stdin.flush()
    finally:
        for p in procs:
            p.kill()
            p.wait(timeout=30)
            p.stdin.close()
            p.stdout.close()
    return jitter_rows(per_round, threads)


def jitter_rows(per_round: list[list[float]], threads: int) -> list[Row]:
    """The two rows of the bench from each round's per-rank seconds: every time (``each``) and each
    round's slowest (``slowest``). ``median_s`` holds the mean (the wait is a difference of means),
    ``ci_*`` its normal 95 % interval, p10 / p90 the samples' own."""
    ranks = len(per_round[0])
    each = [t for r in per_round for t in r]
    slowest = [max(r) for r in per_round]
    return [_mean_row(samples, {"ranks": ranks, "threads": threads, "rounds": len(per_round), "of": of})
            for of, samples in (("each", each), ("slowest", slowest))]


def _mean_row(samples: list[float], params: dict) -> Row:
    mean = statistics.fmean(samples)
    half = 1.96 * statistics.stdev(samples) / math.sqrt(len(samples)) if len(samples) > 1 else 0.0
    q = statistics.quantiles(samples, n=10) if len(samples) > 1 else [mean] * 9
    return Row(BENCH, None, DType.FP32, params, 0.0, 0.0, mean, min(q[0], mean), max(q[-1], mean), len(samples),
               ci_low_s=max(mean - half, 0.0), ci_high_s=mean + half)


def fit_rank_jitter(rows) -> dict[str, float]:
    """``rank_jitter_sigma`` from the bench's two rows (the largest rank count measured): σ with
    E[max of N] = slowest / each (``cost.variability.sigma_for_slowdown``). Empty without them."""
    from simtrain.cost.variability import sigma_for_slowdown
    mine = [r for r in rows if r.bench == BENCH]
    if not mine:
        return {}
    ranks = max(int(r.params["ranks"]) for r in mine)
    by = {r.params["of"]: r for r in mine if int(r.params["ranks"]) == ranks}
    if "each" not in by or "slowest" not in by:
        return {}
    return {"rank_jitter_sigma": sigma_for_slowdown(by["slowest"].median_s / by["each"].median_s, ranks)}



# ──── Child processes ───────────────────────────────────────────────────────────────────────────────

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
