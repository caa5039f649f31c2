"""Check a shipped device profile on a real GPU: GEMM, fused attention, HBM and all-reduce microbenchmarks
measured with torch, each against what the profile predicts through ``model.py`` (same conventions).

    python -m validation.components.gpu_check --out validation/results [--quick] [--device NAME]
                                              [--only gemm,attention,hbm,allreduce]

Detects the GPU (``torch.cuda.get_device_name``) and maps it to a library device (H200, H100, A100
80GB / 40GB; ``--device`` overrides); exits 3 without CUDA or for an unknown GPU. Measured with CUDA
events after warm-up, median of repeated trials (spread = (max - min) / median):

* GEMM (TFLOP/s, 2·M·N·K): bf16 ``torch.matmul`` on the shapes of ``data.GEMM`` for the device's
  GEMM data (H200: H100's, as derive.py) plus a Llama-style grid (M = 2048/4096/8192 tokens × the
  8B model's QKV, output, MLP up and down N×K); fp8 ``torch._scaled_mm`` on the fp8 data shapes
  where the GPU and torch have it (skipped otherwise). Profile: ``model.gemm_tflops``.
* fused attention (TFLOP/s on the FLOPs the kernel executes, components.md §2: fwd 4·B·S²·H·D, halved
  when causal; bwd 2.5× fwd): ``scaled_dot_product_attention`` with the flash backend forced
  (profile kernel ``sdpa``, PyTorch's FA2) and the cuDNN backend (profile kernel ``cudnn``), bf16,
  D = 128, B·S = 16k tokens, H·D = 2048, S = 512…16k, causal and not, fwd and bwd timed apart.
  Profile: ``model.attention_tflops``.
* HBM (GB/s of bytes read + written): BabelStream-sized fp64 arrays (2^25 elements) for copy,
  triad (a = b + s·c) and a·b + c (``addcmul``, 4 arrays), and a 1 GiB device-to-device copy.
  Profile: ``memory_seconds`` on the bytes moved (what ``model.stream_tbps`` evaluates).
* all-reduce busbw (GB/s, nccl-tests convention: S/t · 2(n-1)/n), fp32, 1 MiB…1 GiB, NCCL in spawned
  processes over the visible GPUs (at most 8) with NVLS off (``allreduce-ring``: ring/tree, the
  estimator's node topology) and NCCL's default (``allreduce-nccl``: NVLS on NVSwitch gen 3, expected
  above the profile); skipped with one GPU. Profile: ``collective_time`` on the dp group of that many
  GPUs of the device's shipped node (8 GPUs: ``model.busbw_gbps``).

Error = profile / measured − 1 (as ``model.Comparison``); the summary gives MAPE (mean |error|) per
component. Writes ``components-<gpu-slug>.json`` and ``.md`` into ``--out``. A full run takes about
1–2 minutes on one H200 (3–4 with 8 GPUs, the all-reduce spawns included); ``--quick`` under a minute.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import re
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from validation.components import data, model
from validation.components.gpu_plan import (
    ALLREDUCE_SIZES,
    ATTENTION_SEQS,
    COMPONENTS,
    HEAD_DIM,
    TRANSFORMER_M,
    TRANSFORMER_NK,
    Measurement,
    Plan,
    spread,
)

__all__ = ["Measurement", "Row", "Plan", "device_for_gpu", "gpu_slug", "plan", "profile_value", "published",
           "compare", "summarize", "build_report", "render_md", "write_report", "spread", "main"]

EXIT_NO_GPU = 3


@dataclass(frozen=True)
class Row:
    """A measurement beside the shipped profile's prediction and the published value, if any."""

    component: str
    label: str
    params: dict
    measured: float
    spread: float
    unit: str
    profile: float | None
    published: float | None = None

    @property
    def error(self) -> float | None:
        return None if self.profile is None else self.profile / self.measured - 1.0


# ----------------------------------------------------------------------------------------------
# Devices and plans (no GPU needed)
# ----------------------------------------------------------------------------------------------
def device_for_gpu(name: str, total_memory_bytes: int | None = None) -> str | None:
    """Library device for a ``torch.cuda.get_device_name``; None when there is no profiled match."""
    n = name.upper().replace(" ", "")
    if "GH200" in n:
        return None  # Grace Hopper: H100-class die with its own HBM, not the H200 part
    if "H200" in n:
        return "h200-sxm-141gb"
    if "H100" in n:
        return "h100-sxm5-80gb"
    if "A100" in n:
        if "40GB" in n or "80GB" in n:
            return "a100-sxm4-40gb" if "40GB" in n else "a100-sxm4-80gb"
        small = total_memory_bytes is not None and total_memory_bytes < 60 * data.GIB
        return "a100-sxm4-40gb" if small else "a100-sxm4-80gb"
    return None


def form_factor_note(name: str) -> str | None:
    if re.search(r"PCIE|NVL\b|NVL$", name.upper()):
        return (f"{name} is a PCIe/NVL part; the profile is the SXM part's (higher clocks and power): "
                "measurements below the profile are expected")
    return None


def gpu_slug(name: str) -> str:
    """File-name slug of the GPU name ("NVIDIA H200" → nvidia-h200), as ``machine_slug`` does for cuda."""
    return "-".join(re.findall(r"[a-z0-9]+", name.lower())[:4]) or "unknown-gpu"


def gemm_data_devices(device_name: str) -> tuple[str, ...]:
    """Devices whose GEMM data stand for ``device_name`` (H200: its own fp8 rows and H100's, as derive.py)."""
    src = data.DATA_DEVICE[device_name]
    return (src, "h100-sxm5-80gb") if src == "h200-sxm-141gb" else (src,)


def plan(device_name: str, quick: bool = False, components: tuple[str, ...] = COMPONENTS) -> Plan:
    """What to measure: bf16 on every data shape + the transformer grid, fp8 on the fp8 data shapes."""
    pts = [p for p in data.GEMM if p.device in gemm_data_devices(device_name)]
    shapes = sorted({(p.m, p.n, p.k) for p in pts})
    fp8 = sorted({(p.m, p.n, p.k) for p in pts if p.dtype == "fp8"})
    grid = [(m, n, k) for m in TRANSFORMER_M for n, k in TRANSFORMER_NK]
    if quick:
        keep = {(4096, 4096, 4096), (8192, 8192, 8192), derive_mamf_shape(device_name)}
        shapes, fp8 = [s for s in shapes if s in keep], [s for s in fp8 if s in keep]
        grid = [(4096, n, k) for n, k in (TRANSFORMER_NK[0], TRANSFORMER_NK[2])]
    gemm = [("bf16", *s) for s in dict.fromkeys(shapes + grid)]
    if model.device(device_name).peak("fp8"):
        gemm += [("fp8", *s) for s in fp8]
    seqs = (1024, 4096, 16384) if quick else ATTENTION_SEQS
    sizes = ALLREDUCE_SIZES[::4] + (ALLREDUCE_SIZES[-1],) if quick else ALLREDUCE_SIZES
    return Plan(tuple(gemm), seqs, tuple(dict.fromkeys(sizes)), 3 if quick else 7, tuple(components))


def derive_mamf_shape(device_name: str) -> tuple[int, int, int]:
    p = next(q for q in data.GEMM if q.device in gemm_data_devices(device_name) and q.note == "sets the matmul ceiling")
    return p.m, p.n, p.k


# ----------------------------------------------------------------------------------------------
# Profile predictions and published values (no GPU needed)
# ----------------------------------------------------------------------------------------------
def _eff(device_name: str):
    from simtrain.cost.compute import device_efficiency
    return device_efficiency(model.device(device_name))


def profile_value(component: str, params: dict, device_name: str) -> float | None:
    """What the shipped profile of ``device_name`` predicts for a measurement, in its unit."""
    dev, eff, kind = model.device(device_name), _eff(device_name), component.split("-")[0]
    if kind == "gemm":
        p = data.GemmPoint(device_name, params["dtype"], params["m"], params["n"], params["k"], 0.0, "", "", "")
        return model.gemm_tflops(p, dev, eff)
    if kind == "attention":
        kernel = eff.attention_kernels.get(params["kernel"])
        if kernel is None:
            return None
        p = data.AttentionPoint(device_name, params["kernel"], params["phase"], params["causal"], HEAD_DIM,
                                params["seq"], 0.0, "", "", "")
        return model.attention_tflops(p, dev, eff, kernel)
    if kind == "hbm":
        from simtrain.cost.compute import memory_seconds
        return params["bytes_moved"] / memory_seconds(params["bytes_moved"], dev, eff) / 1e9
    if kind == "allreduce":
        return busbw_profile_gbps(params["size_bytes"], params["world"], device_name, eff)
    raise ValueError(f"unknown component {component!r}")


def busbw_profile_gbps(size_bytes: int, world: int, device_name: str, eff) -> float:
    """All-reduce busbw of the dp group of ``world`` GPUs on the device's shipped one-node cluster."""
    if world == 8:
        return model.busbw_gbps(data.BusbwPoint(device_name, "all_reduce", size_bytes, 0.0, "ring", "", "", ""),
                                device_name, eff)
    import simtrain as st
    from simtrain.cost.collectives import collective_time
    from simtrain.parallel.topology import group_topology
    topo = group_topology(st.load_cluster(model.NODE_CLUSTER[device_name], nodes=1), {"dp": world}, "dp")
    return collective_time("all_reduce", size_bytes, topo, efficiency=eff).busbw_bytes_per_s / 1e9


def published(component: str, params: dict, device_name: str) -> float | None:
    """The public measurement of the same point from ``data.py`` (the profile's inputs), if there is one."""
    kind, devices = component.split("-")[0], gemm_data_devices(device_name)
    if kind == "gemm":
        for dtype in (params["dtype"], "fp16") if params["dtype"] == "bf16" else (params["dtype"],):
            for p in data.GEMM:
                if p.device in devices and p.dtype == dtype and (p.m, p.n, p.k) == (params["m"], params["n"], params["k"]):
                    return p.tflops
    elif kind == "attention":
        return next((p.tflops for p in data.ATTENTION if p.device in devices and p.kernel == params["kernel"]
                     and (p.phase, p.causal, p.seq, p.head_dim) == (params["phase"], params["causal"], params["seq"],
                                                                    HEAD_DIM)), None)
    elif kind == "hbm" and params.get("babelstream"):
        return next((1e3 * p.tbps for p in data.STREAM if p.device == data.DATA_DEVICE[device_name]
                     and p.kernel == params["kernel"]), None)
    elif kind == "allreduce" and params["world"] == 8:
        algo = "nvls" if component == "allreduce-nccl" and not device_name.startswith("a100") else "ring"
        return next((p.busbw_gbps for p in data.BUSBW if p.device == data.DATA_DEVICE[device_name]
                     and p.kind == "all_reduce" and p.algorithm == algo and p.size_bytes == params["size_bytes"]), None)
    return None


# ----------------------------------------------------------------------------------------------
# Comparison and report (no GPU needed)
# ----------------------------------------------------------------------------------------------
def compare(measurements: list[Measurement], device_name: str) -> list[Row]:
    return [Row(m.component, m.label, dict(m.params), m.measured, m.spread, m.unit,
                profile_value(m.component, m.params, device_name), published(m.component, m.params, device_name))
            for m in measurements]


def summarize(rows: list[Row]) -> dict[str, dict]:
    """Per component: points, points with a profile, MAPE, mean signed error, worst |error| (fractions)."""
    out: dict[str, dict] = {}
    for comp in dict.fromkeys(r.component for r in rows):
        errs = [r.error for r in rows if r.component == comp and r.error is not None]
        out[comp] = {"points": sum(r.component == comp for r in rows), "compared": len(errs),
                     "mape": sum(abs(e) for e in errs) / len(errs) if errs else None,
                     "mean_error": sum(errs) / len(errs) if errs else None,
                     "worst_error": max(errs, key=abs) if errs else None}
    return out


def build_report(meta: dict, measurements: list[Measurement], skipped: list[dict], device_name: str) -> dict:
    rows = compare(measurements, device_name)
    return {"meta": dict(meta, device=device_name), "summary": summarize(rows),
            "rows": [dict(asdict(r), error=r.error) for r in rows], "skipped": list(skipped)}


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:+.1f}%"


def _num(x: float | None) -> str:
    return "—" if x is None else f"{x:.4g}"


def render_md(report: dict) -> str:
    m = report["meta"]
    lines = [f"# Component check: {m.get('gpu_name', '?')} against the `{m['device']}` profile", "",
             f"torch {m.get('torch', '?')}, CUDA {m.get('cuda', '?')}, {m.get('gpu_count', '?')} GPU(s), "
             f"{m.get('date', '?')}, {'quick' if m.get('quick') else 'full'} run, {m.get('wall_s', 0):.0f} s. "
             "Produced by `python -m validation.components.gpu_check`.", "",
             "error = profile / measured − 1 (negative: the profile predicts slower than measured); "
             "spread = (max − min) / median over the trials; published = the public measurement of the same "
             "point in validation/components/data.py (the profile's inputs).", "",
             "| component | points | compared | MAPE | mean error | worst |", "|---|---|---|---|---|---|"]
    for comp, s in report["summary"].items():
        mape = "—" if s["mape"] is None else f"{100 * s['mape']:.1f}%"
        lines.append(f"| {comp} | {s['points']} | {s['compared']} | {mape} | {_pct(s['mean_error'])} "
                     f"| {_pct(s['worst_error'])} |")
    for comp in report["summary"]:
        rows = [r for r in report["rows"] if r["component"] == comp]
        unit = rows[0]["unit"]
        lines += ["", f"## {comp}", "", f"| shape | measured {unit} | spread | profile {unit} | error | published |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {r['label']} | {_num(r['measured'])} | {100 * r['spread']:.1f}% | {_num(r['profile'])} "
                  f"| {_pct(r['error'])} | {_num(r['published'])} |" for r in rows]
    if report["skipped"]:
        lines += ["", "## Skipped", ""] + [f"- {s['component']}: {s['reason']}" for s in report["skipped"]]
    if m.get("notes"):
        lines += ["", "## Notes", ""] + [f"- {n}" for n in m["notes"]]
    return "\n".join(lines) + "\n"


def write_report(report: dict, out_dir: str | Path, slug: str) -> dict[str, Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / f"components-{slug}.json", "md": out / f"components-{slug}.md"}
    paths["json"].write_text(json.dumps(report, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    paths["md"].write_text(render_md(report), encoding="utf-8")
    return paths


def summary_text(report: dict) -> str:
    lines = [f"{'component':18}{'points':>7} {'MAPE':>8} {'mean':>9} {'worst':>9}"]
    for comp, s in report["summary"].items():
        mape = "—" if s["mape"] is None else f"{100 * s['mape']:.1f}%"
        lines.append(f"{comp:18}{s['points']:7d} {mape:>8} {_pct(s['mean_error']):>9} {_pct(s['worst_error']):>9}")
    lines += [f"skipped {s['component']}: {s['reason']}" for s in report["skipped"]]
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# The run (CUDA: the benchmarks are in gpu_bench.py, torch imported inside its functions)
# ----------------------------------------------------------------------------------------------
def _measure(p: Plan) -> tuple[list[Measurement], list[dict]]:
    from validation.components import gpu_bench
    out: list[Measurement] = []
    skipped: list[dict] = []
    steps = {"gemm": gpu_bench.measure_gemm, "attention": gpu_bench.measure_attention,
             "hbm": gpu_bench.measure_hbm, "allreduce": gpu_bench.measure_allreduce}
    for comp in p.components:
        t0 = time.perf_counter()
        try:
            got, skip = steps[comp](p)
        except Exception as exc:  # one component's failure must not hide the others
            got, skip = [], [{"component": comp, "reason": f"failed: {type(exc).__name__}: {exc}"}]
        out += got
        skipped += skip
        print(f"  {comp}: {len(got)} points, {len(skip)} skipped, {time.perf_counter() - t0:.0f} s", flush=True)
    return out, skipped


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m validation.components.gpu_check", description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="validation/results", help="directory for components-<gpu>.json/.md")
    ap.add_argument("--quick", action="store_true", help="fewer shapes and trials (a first try)")
    ap.add_argument("--device", help="library device to compare with (default: from the GPU name)")
    ap.add_argument("--only", default=",".join(COMPONENTS), help="comma list of " + ", ".join(COMPONENTS))
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    comps = tuple(c.strip() for c in args.only.split(",") if c.strip())
    if bad := [c for c in comps if c not in COMPONENTS]:
        print(f"gpu_check: unknown component(s) {bad}; choose from {COMPONENTS}", file=sys.stderr)
        return 2
    from validation.components import gpu_bench
    facts = gpu_bench.gpu_facts()
    if facts is None:
        print("gpu_check: torch.cuda.is_available() is False: no GPU here", file=sys.stderr)
        return EXIT_NO_GPU
    name = args.device or device_for_gpu(facts["gpu_name"], facts["total_memory_bytes"])
    if name is None or name not in data.DATA_DEVICE:
        print(f"gpu_check: no component-derived profile for {facts['gpu_name']!r} (known: {sorted(data.DATA_DEVICE)}); "
              "pass --device NAME to compare anyway", file=sys.stderr)
        return EXIT_NO_GPU
    p = plan(name, args.quick, comps)
    print(f"gpu_check: {facts['gpu_name']} x{facts['gpu_count']} → {name}; {len(p.gemm)} GEMMs, "
          f"{len(p.attention_seqs)} sequence lengths, trials {p.trials}", flush=True)
    t0 = time.perf_counter()
    measurements, skipped = _measure(p)
    notes = [n for n in (form_factor_note(facts["gpu_name"]),) if n]
    meta = dict(facts, quick=args.quick, wall_s=round(time.perf_counter() - t0, 1), notes=notes,
                date=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d"))
    report = build_report(meta, measurements, skipped, name)
    paths = write_report(report, args.out, gpu_slug(facts["gpu_name"]))
    print(summary_text(report))
    print(f"wrote {paths['json']} and {paths['md']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
