"""Small models a new user trains first, predicted from this machine's profile (issue 12).

    python -m validation.lab.small_models [--profile P.yaml] [--half-gap-from M.json] [--processes 3]
                                          [--out DIR]

The zoo's steps take 13–140 ms here; a user's first models often take 0.3–4 ms: an MNIST MLP, a
reinforcement-learning policy, a tabular classifier, a deep narrow MLP, an MNIST CNN, and two chains
of 32 identical small layers. In that range a step is mostly framework work (launches, Python,
autograd, the optimizer's own code), which is what these cases test. No calibration step sees them.

Timing: each case's step (``steps.train_step``: fused optimizer, ``zero_grad(set_to_none=True)``) in
``--processes`` fresh processes, each timing every case in ``--rounds`` rounds of ``--steps`` steps,
the cases in turn (a slow spell then falls on all of them); a process's time for a case is the
median of its rounds, the case's the median over the processes. Fresh processes because on this
2-core VM a process's small steps run in one of two modes for its whole life, about 2× apart with
2 threads (an MNIST MLP step at 0.62 or 1.50 ms; 1 thread: always 0.61 ms); the report lists each
process's times, so the modes are visible.

Predictions: ``st.estimate`` with each profile (default the committed result of record), and with
``--half-gap-from`` the same profile with ``Efficiency.step_call_half_gap_s`` taken from a
measurement file's step-state rows (``bench_memory.fit_half_gap``): how the in-step launch costs that
profile charges at 20 ms would be charged at each op's own gap.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import subprocess
import sys
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

import simtrain as st
from simtrain.calibrate.bench_memory import fit_half_gap
from simtrain.calibrate.fit import load_profile
from simtrain.calibrate.records import Measurements
from validation.outdir import COMMITTED_RESULTS, default_out_dir
from validation.steps import make_optimizer, predict_step, time_steps, train_step
from validation.workloads import Workload

__all__ = ["SMALL", "small_workloads", "time_cases", "main"]

DEFAULT_PROFILE = COMMITTED_RESULTS / "profile-amd-epyc-2c.yaml"


def _mlp(*dims: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for a, b in zip(dims[:-1], dims[1:], strict=False):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def _mnist_cnn() -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1),
                         nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(16 * 7 * 7, 10))


def _batch(shape: tuple[int, ...], classes: int):
    def make(batch: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        x, y = torch.randn(batch, *shape, generator=g), torch.randint(0, classes, (batch,), generator=g)
        return (x,), (lambda out: F.cross_entropy(out, y))
    return make


#: name → (module factory, input shape per sample, classes, batch, optimizer).
SMALL = {
    "mnist_mlp_b64": (lambda: _mlp(784, 256, 256, 10), (784,), 10, 64, "adamw"),
    "mnist_mlp_b8": (lambda: _mlp(784, 256, 256, 10), (784,), 10, 8, "adamw"),
    "rl_policy": (lambda: _mlp(32, 64, 64, 64, 4), (32,), 4, 32, "adamw"),
    "tabular": (lambda: _mlp(20, 128, 128, 2), (20,), 2, 256, "adamw"),
    "deep_narrow": (lambda: _mlp(*([32] * 17), 4), (32,), 4, 16, "momentum"),
    "mnist_cnn": (_mnist_cnn, (1, 28, 28), 10, 32, "momentum"),
    "chain32x16": (lambda: _mlp(*([16] * 33)), (16,), 16, 4, "momentum"),
    "chain32x64": (lambda: _mlp(*([64] * 33)), (64,), 64, 16, "momentum"),
}


def small_workloads() -> list[Workload]:
    return [Workload(name, "small", batch, make, _batch(shape, classes), opt)
            for name, (make, shape, classes, batch, opt) in SMALL.items()]


def time_cases(rounds: int, steps: int, threads: int) -> dict[str, float]:
    """This process's median over ``rounds`` of each case's median of ``steps`` single steps, the
    cases in turn within each round (seconds)."""
    torch.set_num_threads(threads)
    runs = []
    for w in small_workloads():
        module, inputs, loss_fn = w.build("cpu", seed=0)
        step = train_step(module, inputs, loss_fn, make_optimizer(w.optimizer, module.parameters(), "cpu"))
        runs.append((w.name, step, [time_steps(step, "cpu", 10, steps).median_s]))  # round 1 after warm-up
    for _ in range(rounds - 1):
        for _name, step, medians in runs:
            medians.append(time_steps(step, "cpu", 0, steps).median_s)
    return {name: statistics.median(medians) for name, _step, medians in runs}


def _processes(n: int, rounds: int, steps: int, threads: int) -> list[dict[str, float]]:
    cmd = [sys.executable, "-m", "validation.lab.small_models", "--child", "--rounds", str(rounds),
           "--steps", str(steps), "--threads", str(threads)]
    root = Path(__file__).resolve().parents[2]  # where ``validation`` imports from, whatever the caller's cwd
    return [json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=root).stdout)
            for _ in range(n)]


def _devices(profiles: list[Path], half_gap_from: Path | None) -> dict[str, st.Device]:
    devices = {p.name: load_profile(p) for p in profiles}
    if half_gap_from is not None:
        got = fit_half_gap(Measurements.load(half_gap_from).rows)
        if not got:
            raise SystemExit(f"{half_gap_from}: no step-state rows at three gaps or more to fit a half gap from")
        for p in profiles:
            d = devices[p.name]
            devices[f"{p.name} + half gap {1e3 * got['step_call_half_gap_s']:.1f} ms"] = d.model_copy(
                update={"efficiency": d.efficiency.model_copy(update=got)})
    return devices


def predictions(devices: dict[str, st.Device]) -> dict[str, dict[str, float]]:
    """case → profile label → predicted step seconds."""
    out = {}
    for w in small_workloads():
        module, inputs, loss_fn = w.build("cpu", seed=0)
        model = st.Model.from_torch(copy.deepcopy(module), inputs, loss_fn, name=w.name)
        out[w.name] = {k: predict_step(model, d, w.batch, w.optimizer).step_time_s for k, d in devices.items()}
    return out


def _markdown(measured: list[dict[str, float]], predicted: dict[str, dict[str, float]], args) -> str:
    labels = list(next(iter(predicted.values())))
    lines = ["# Small models: predicted against measured steps (issue 12)", "",
             f"{len(measured)} fresh processes × {args.rounds} rounds × {args.steps} steps, {args.threads} threads; "
             "measured = median over the processes of each process's median round. Errors: predicted ÷ measured − 1.", "",
             "| case | measured ms | per process ms | " + " | ".join(labels) + " |",
             "|---|---:|---|" + "---:|" * len(labels)]
    errors = {k: [] for k in labels}
    for case, pred in predicted.items():
        per = [m[case] for m in measured]
        mid = statistics.median(per)
        cells = []
        for k in labels:
            errors[k].append(abs(pred[k] / mid - 1))
            cells.append(f"{1e3 * pred[k]:.3f} ({100 * (pred[k] / mid - 1):+.0f} %)")
        lines.append(f"| {case} | {1e3 * mid:.3f} | {' / '.join(f'{1e3 * t:.3f}' for t in per)} | " + " | ".join(cells) + " |")
    lines.append("| **MAPE** |  |  | " + " | ".join(f"**{100 * statistics.fmean(e):.1f} %**" for e in errors.values()) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--profile", type=Path, action="append", help=f"profile(s) to predict with (default {DEFAULT_PROFILE.name})")
    p.add_argument("--half-gap-from", type=Path, help="measurements whose step-state rows give a half gap")
    p.add_argument("--processes", type=int, default=3)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(time_cases(args.rounds, args.steps, args.threads)))
        return 0
    predicted = predictions(_devices(args.profile or [DEFAULT_PROFILE], args.half_gap_from))
    measured = _processes(args.processes, args.rounds, args.steps, args.threads)
    text = _markdown(measured, predicted, args)
    out = args.out or default_out_dir()
    out.mkdir(parents=True, exist_ok=True)
    (out / "small-models.md").write_text(text, encoding="utf-8")
    (out / "small-models.json").write_text(json.dumps({"measured": measured, "predicted": predicted}, indent=1),
                                           encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
