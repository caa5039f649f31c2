"""Does this machine switch modes, and what does each mode do to which workload? (issue 12)

Times, again and again for ``--seconds``, five workloads a few milliseconds each:

* ``dispatch``: the calibration's mode sentinel, one 16 KiB ``torch.exp`` call (per call);
* ``gemm_mid``: a 128×784 @ 784×1024 GEMM, the medium MLP's first layer (weights 3 MiB, past L2);
* ``gemm256``: a 256³ GEMM, in L2 (the calibration's GEMM sentinel);
* ``copy64``: a 64 MiB copy, past a 32 MiB last-level cache;
* ``mlp_step``: with ``--step``, the medium MLP's training step (validation zoo; needs the checkout).

Then it splits the dispatch readings in two (``simtrain.calibrate.modes.split_modes``, the calibration's
own rule) and prints each workload's median in each mode, and the timeline in 10 s bins. On this
project's 2-core EPYC VM (2026-12-05, three runs of 3–5 minutes): dispatch 3.6 against 6.2 µs, the
mid GEMM 1.05 against 1.48 ms, the 64 MiB copy 3.1 against 2.0 ms (the other way), the 256³ GEMM within
4 %, the MLP step 12.2 against 15.1 ms; each mode held for one to several minutes. This script,
``--seconds 100 --step`` the same day (1,388 readings, 1,267 slow): dispatch 3.5 / 5.8 µs (1.67×), the
mid GEMM 1.09 / 1.38 ms (1.27×), the 256³ GEMM 1.03×, the 64 MiB copy 2.85 / 1.73 ms (0.61×), the MLP
step 12.2 / 15.6 ms (1.28×).

    python benchmarks/bench_placement_modes.py --seconds 180 [--step]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import torch

from simtrain.calibrate.modes import split_modes
from simtrain.calibrate.robust import dispatch_call


def _median_s(fn, samples: int, inner: int) -> float:
    out = []
    for _ in range(samples):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        out.append((time.perf_counter() - t0) / inner)
    return statistics.median(out)


def _workloads(step: bool) -> dict[str, tuple]:
    a, b = torch.randn(128, 784), torch.randn(784, 1024)
    c = torch.randn(256, 256)
    dst, src = torch.empty(16 * 2**20), torch.randn(16 * 2**20)
    out = {"dispatch": (dispatch_call("cpu"), 5, 100), "gemm_mid": (lambda: a @ b, 5, 2),
           "gemm256": (lambda: c @ c, 5, 4), "copy64": (lambda: dst.copy_(src), 3, 1)}
    if step:
        from validation import steps
        from validation.workloads import workloads
        w = workloads("medium", ("mlp",))[0]
        module, inputs, loss_fn = w.build("cpu", 0)
        opt = steps.make_optimizer(w.optimizer, module.parameters(), "cpu")
        out["mlp_step"] = (steps.train_step(module, inputs, loss_fn, opt), 3, 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--step", action="store_true", help="also time the medium MLP's step (checkout only)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, {args.threads} threads, "
          f"torch {torch.__version__}")
    work = _workloads(args.step)
    for fn, _, _ in work.values():
        fn()
    rows, start = [], time.time()
    while time.time() - start < args.seconds:
        rows.append({"t": time.time() - start, **{k: _median_s(fn, n, inner) for k, (fn, n, inner) in work.items()}})
    modes = split_modes([r["dispatch"] for r in rows])
    print(f"{len(rows)} readings over {args.seconds:.0f} s")
    if modes is None:
        print("one mode: the dispatch readings are within 1.3x of each other")
    else:
        print(f"two modes: {modes.slow_readings} of {modes.readings} readings slow "
              f"(dispatch {modes.fast_s * 1e6:.2f} / {modes.slow_s * 1e6:.2f} us)")
        for k in work:
            fast = statistics.median(r[k] for r in rows if not modes.is_slow(r["dispatch"]))
            slow = statistics.median(r[k] for r in rows if modes.is_slow(r["dispatch"]))
            print(f"  {k:9s} fast mode {fast * 1e3:9.4f} ms   slow mode {slow * 1e3:9.4f} ms   slow/fast {slow / fast:.2f}")
    for lo in range(0, int(args.seconds), 10):
        sel = [r for r in rows if lo <= r["t"] < lo + 10]
        if sel:
            print(f"  t={lo:4d} s " + " ".join(f"{k}={statistics.median(r[k] for r in sel) * 1e3:.4f}" for k in work))


if __name__ == "__main__":
    main()
