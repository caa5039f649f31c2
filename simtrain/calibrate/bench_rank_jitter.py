"""How long the ranks of a job sharing this host wait for the slowest of them at each sync (CPU).

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
"""

from __future__ import annotations

import math
import statistics
import subprocess
import sys
import time

from simtrain.calibrate.child_env import child_env
from simtrain.calibrate.records import Row
from simtrain.errors import SimtrainError
from simtrain.glossary import DType

__all__ = ["BENCH", "ROUNDS", "JITTER_MODULE", "jitter_main", "bench_rank_jitter", "jitter_rows", "fit_rank_jitter"]


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
                              env=child_env(), text=True) for _ in range(ranks)]
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
