"""What a GPU sustains on back-to-back GEMMs, with its clocks and power logged (issue 36, item 7).

    python -m validation.components.sustained_gemm --out OUT [--seconds 40] [--zeros-seconds 10]

The profiles' Hopper matmul ceilings (``derive.SUSTAINED_MATMUL``: 0.675 of the bf16 peak, 0.627 of
fp8) come from one H200 run of short benchmarks; a power-limited GPU lowers its clocks after seconds of
load, so this check runs each precision for ``--seconds`` without a pause:

* bf16 ``torch.matmul`` and, from compute capability 8.9, fp8 ``torch._scaled_mm`` on a Llama-70B MLP
  shape (8192 tokens × 28672 × 8192: the up projection), inputs random normal;
* fp8 again with cuBLASLt's fast accumulation for ``--fast-accum-seconds`` (``use_fast_accum=True``):
  Transformer Engine runs its forward GEMMs so (``_2X_ACC_FPROP = False``) and its gradient GEMMs with
  the periodic fp32 promotion the default measures, so the ratio of the two prices Megatron-Core's
  fp8 forward;
* the same on zeros for ``--zeros-seconds``: a GEMM on zeros toggles fewer transistors, draws less power
  and holds higher clocks, which is why a sustained ceiling is measured on random data (SemiAnalysis's
  H100 / H200 figures; MAMF's max-search on zeros-free random data);
* timed in windows of about one second (CUDA events around back-to-back calls); ``nvidia-smi`` samples
  the SM clock, board power and temperature every 200 ms beside it.

Per run: the first window (burst), the median of the second half's windows (sustained), both as
TFLOP/s and as a fraction of the dense peak of the matching library device, and the median clock and
power over the run. Writes ``sustained-<gpu-slug>.json`` and ``.md`` into ``--out``; exits 3 without
CUDA. With the defaults it takes about two and a half minutes on one GPU. The profile is updated by hand from the
sustained fractions (``derive.SUSTAINED_MATMUL``), citing the committed report.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["SHAPE", "FAST_ACCUM", "parse_smi", "window_summary", "samples_in", "run_plan", "render_md", "main"]

SHAPE = (8192, 28672, 8192)
"""(M, N, K): 8192 tokens through Llama-70B's MLP up projection (hidden 8192, FFN 28672)."""
WINDOW_S = 1.0
FAST_ACCUM = "random, fast accum"
"""The ``data`` label of the fp8 run with cuBLASLt's fast accumulation."""
SMI_FIELDS = "timestamp,clocks.sm,power.draw,temperature.gpu"
EXIT_NO_GPU = 3


def parse_smi(text: str) -> list[dict]:
    """``nvidia-smi --query-gpu=SMI_FIELDS --format=csv,noheader,nounits`` lines → samples
    ``{"t": epoch s, "sm_mhz", "power_w", "temp_c"}``; a malformed line is skipped."""
    out = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 4:
            continue
        try:
            t = _dt.datetime.strptime(cells[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            out.append({"t": t, "sm_mhz": float(cells[1]), "power_w": float(cells[2]), "temp_c": float(cells[3])})
        except ValueError:
            continue
    return out


def samples_in(samples: list[dict], t0: float, t1: float) -> dict:
    """Median clock, power and temperature of the samples taken between host times ``t0`` and ``t1``."""
    inside = [s for s in samples if t0 <= s["t"] <= t1]
    if not inside:
        return {"samples": 0}
    return {"samples": len(inside), **{k: statistics.median(s[k] for s in inside) for k in ("sm_mhz", "power_w",
                                                                                              "temp_c")}}


def window_summary(tflops: list[float], peak_tflops: float) -> dict:
    """Burst (first window) and sustained (median of the second half) TFLOP/s and their share of peak."""
    if not tflops:
        raise ValueError("no timed windows")
    sustained = statistics.median(tflops[len(tflops) // 2:])
    return {"windows": len(tflops), "burst_tflops": tflops[0], "sustained_tflops": sustained,
            "min_tflops": min(tflops), "burst_fraction": tflops[0] / peak_tflops,
            "sustained_fraction": sustained / peak_tflops, "sustained_over_burst": sustained / tflops[0]}


def _timed_windows(fn, seconds: float) -> tuple[list[float], float, float]:
    """TFLOP/s per ~1 s window of back-to-back calls for ``seconds``; host start and end times."""
    import torch
    flops = 2.0 * SHAPE[0] * SHAPE[1] * SHAPE[2]
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()
    torch.cuda.synchronize()
    t0 = time.time()
    calls, out = 1, []
    while time.time() - t0 < seconds:
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        s = start.elapsed_time(end) / 1e3
        out.append(calls * flops / s / 1e12)
        calls = max(1, int(calls * WINDOW_S / max(s, 1e-6)))
    return out[1:] or out, t0, time.time()  # the first window only sizes the next


def _smi() -> subprocess.Popen | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    return subprocess.Popen([exe, f"--query-gpu={SMI_FIELDS}", "--format=csv,noheader,nounits", "-lms", "200",
                             "-i", "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def run_plan(dtypes: list[str], seconds: float, zeros_seconds: float, fast_accum_seconds: float) -> list[tuple]:
    """(dtype, data, seconds) in the order run: each dtype on random data, fp8 with fast accumulation,
    then each on zeros (a run of 0 s is left out)."""
    plan = [(d, "random", seconds) for d in dtypes]
    plan += [("fp8", FAST_ACCUM, fast_accum_seconds)] if "fp8" in dtypes and fast_accum_seconds > 0 else []
    return plan + [(d, "zeros", zeros_seconds) for d in dtypes if zeros_seconds > 0]


def _runs(plan: list[tuple[str, str, float]], peaks: dict[str, float]) -> list[dict]:
    from validation.components.gpu_bench import gemm_fn
    proc = _smi()
    runs = []
    try:
        for dtype, data, seconds in plan:
            fn = gemm_fn(dtype, *SHAPE, zeros=data == "zeros", fast_accum=data == FAST_ACCUM)
            windows, t0, t1 = _timed_windows(fn, seconds)
            runs.append({"dtype": dtype, "data": data, "seconds": seconds, "t0": t0, "t1": t1,
                         "tflops": [round(x, 1) for x in windows], **window_summary(windows, peaks[dtype])})
    finally:
        text = ""
        if proc is not None:
            proc.terminate()
            text = proc.communicate(timeout=10)[0]
    samples = parse_smi(text)
    for r in runs:
        r["gpu"] = samples_in(samples, r["t0"], r["t1"])
    return runs


def render_md(report: dict) -> str:
    lines = [f"# Sustained GEMMs: {report['gpu_name']} ({report['device']}), {report['date']}", "",
             f"Shape M×N×K = {'×'.join(map(str, SHAPE))}; torch {report['torch']}, CUDA {report['cuda']}; "
             f"`python -m validation.components.sustained_gemm` (wall {report['wall_s']} s).", "",
             "| dtype | data | s | burst TFLOP/s | sustained TFLOP/s | sustained / peak | sustained / burst | "
             "SM MHz | W | °C |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["runs"]:
        g = r["gpu"]
        gpu = (f"{g['sm_mhz']:.0f} | {g['power_w']:.0f} | {g['temp_c']:.0f}" if g.get("samples") else "— | — | —")
        lines.append(f"| {r['dtype']} | {r['data']} | {r['seconds']:.0f} | {r['burst_tflops']:.0f} | "
                     f"{r['sustained_tflops']:.0f} | {r['sustained_fraction']:.3f} | {r['sustained_over_burst']:.3f} | "
                     f"{gpu} |")
    lines += ["", f"Profile (derive.SUSTAINED_MATMUL): {report['profile']}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for sustained-<gpu>.json / .md")
    ap.add_argument("--seconds", type=float, default=40.0, help="seconds of random-data GEMMs per precision")
    ap.add_argument("--zeros-seconds", type=float, default=10.0, help="seconds on zeros per precision (0: skip)")
    ap.add_argument("--fast-accum-seconds", type=float, default=20.0,
                    help="seconds of fp8 with fast accumulation on random data (0: skip)")
    ap.add_argument("--device", help="library device for the peaks (default: detected from the GPU's name)")
    args = ap.parse_args(argv)
    from validation.components.gpu_bench import gpu_facts
    from validation.components.gpu_check import device_for_gpu, gpu_slug
    facts = gpu_facts()
    if facts is None:
        print("sustained_gemm: torch.cuda.is_available() is False: no GPU here", file=sys.stderr)
        return EXIT_NO_GPU
    import simtrain as st
    from simtrain.glossary import DType
    from validation.components.derive import SUSTAINED_MATMUL
    name = args.device or device_for_gpu(facts["gpu_name"], facts["total_memory_bytes"])
    if name is None:
        print(f"sustained_gemm: no library device for {facts['gpu_name']!r}; pass --device NAME", file=sys.stderr)
        return EXIT_NO_GPU
    dev = st.load_device(name)
    dtypes = ["bf16"] + (["fp8"] if tuple(map(int, facts["capability"].split("."))) >= (8, 9) else [])
    peaks = {d: dev.peak_flops_per_s[DType(d)].value / 1e12 for d in dtypes}
    plan = run_plan(dtypes, args.seconds, args.zeros_seconds, args.fast_accum_seconds)
    t0 = time.perf_counter()
    report = dict(facts, device=name, date=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d"),
                  runs=_runs(plan, peaks), profile=SUSTAINED_MATMUL["hopper"])
    report["wall_s"] = round(time.perf_counter() - t0, 1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    slug = gpu_slug(facts["gpu_name"])
    (out / f"sustained-{slug}.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    (out / f"sustained-{slug}.md").write_text(render_md(report), encoding="utf-8")
    print(render_md(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
