"""The ``efficiency:`` block of a device YAML, written from a derived profile with every number cited.

``render(device_name, eff)`` returns the block; ``write(device_name, text)`` replaces the block (the
file's last top-level key) in ``hardware_specs/devices/<device>.yaml`` and leaves the rest untouched.
"""

from __future__ import annotations

from pathlib import Path

from simtrain.specs.efficiency import Efficiency

__all__ = ["render", "write", "device_file"]

ROOT = Path(__file__).resolve().parents[2]
_VECTOR = ("elementwise", "norm", "reduction", "embedding", "memory")

_WHOSE = {
    "a100-sxm4-80gb": "",
    "a100-sxm4-40gb": ("  # Every number is A100-SXM4-80GB's (components.md 7: no A100-40GB component data; same GA100\n"
                       "  # die, 108 SMs, 1.41 GHz, NVSwitch gen 2): U for this part. HBM: the 80 GB part's fraction.\n"),
    "h100-sxm5-80gb": "",
    "h200-sxm-141gb": ("  # GEMM and attention are H100 SXM's (same GH100 die): [MLE-ACC] author \"H200 is the same\"; the\n"
                       "  # [AZ-H200] fp8 sweep is within 3 % of [AZ-H100] at >= 2048^3 and FA2 fwd+bwd 329.3 vs 327.9\n"
                       "  # TFLOP/s (+0.4 %). HBM and NCCL are H200's own rows.\n"),
}

_GEMM = {
    "a100": ("joint least squares with half_flops over the points below, bounded by the MAMF best shape "
             "1024x10240x5120 bf16 271.2 TF / 312 = 0.869 [MLE-ACC] 1a (V)",
             "[AZ-A100] 1b fp16 square sweep 1024^3-16384^3 + 1c 6144x12288x12288 and 1024x2145x1024 (V)"),
    "hopper": ("joint least squares with half_flops over the points below, bounded by the MAMF best shape "
               "2048x2048x13312 bf16 794.5 TF / 989.4 = 0.803 [MLE-ACC] 1a (V)",
               "[ZZC79] 1b bf16/fp16 torch.matmul sweep (U), [PYPTX] cuBLAS 4096^3 / 8192^3 (U), 1a "
               "[MAG] [CHILLEE] shapes (V2); fp8 [AZ-H100] not fitted (cuBLASLt fp8 ceiling ~70 %)"),
}

_MEM = {
    "a100-sxm4-80gb": "BabelStream triad 1.70 TB/s of 2.039 [AZ-A100] 3 (V); copy 1.61, dot 1.75",
    "a100-sxm4-40gb": "A100-80GB BabelStream triad 1.70/2.039 [AZ-A100] 3 (V there; U for 40 GB HBM2)",
    "h100-sxm5-80gb": "BabelStream triad 2.97 TB/s of 3.35 [AZ-H100] 3 (V); copy 2.90, dot 3.18",
    "h200-sxm-141gb": "BabelStream triad 4.15 TB/s of 4.8 [AZ-H200] 3 (V); copy 4.01, dot 4.48",
}

_LINK = {
    "a100": "8-GPU all-reduce sweeps [AZ-A100] and [MLE-NET] 4a >= 16 MiB (V), ring on the NVSwitch dp group",
    "h100-sxm5-80gb": ("ring busbw ~370 GB/s, maintainer [NT-212] 4b (V): the estimator's node topology runs "
                       "ring/tree, not NVLS"),
    "h200-sxm-141gb": ("ring all-reduce 367.2 / all-gather 361.4 / reduce-scatter 362.9 GB/s at 16 GiB "
                       "[MLE-NET] 4b (V): the estimator's node topology runs ring/tree, not NVLS"),
}
_HALF = {
    "a100": "per-rank chunk (S/n) of half busbw: ramp of the same 8-GPU sweeps (16 MiB: 109 of 232 GB/s) [AZ-A100] [MLE-NET] 4a (V)",
    "h100-sxm5-80gb": "per-rank chunk (S/n) of half busbw: shape of the NVLS sweep [AZ-H100] 4a >= 16 MiB (busbw / busbw at 8 GiB) (V; ramp of NVLS taken for ring, U)",
    "h200-sxm-141gb": "per-rank chunk (S/n) of half busbw: shape of the NVLS sweep [AZ-H200] 4a >= 16 MiB (busbw / busbw at 8 GiB) (V; ramp of NVLS taken for ring, U)",
}


def device_file(device_name: str) -> Path:
    return ROOT / "hardware_specs" / "devices" / f"{device_name}.yaml"


def _g(x: float) -> str:
    """Three significant digits; exponent form keeps its dot so YAML 1.1 reads a float."""
    return f"{x:.3g}" if 1e-3 <= abs(x) < 1e4 or x == 0 else f"{x:.2e}"


def render(device_name: str, eff: Efficiency) -> str:
    """The cited ``efficiency:`` block of ``device_name``."""
    fam = "a100" if device_name.startswith("a100") else "hopper"
    c = eff.compute
    lines = ["efficiency:",
             "  # Derived from component measurements only (components.md; no end-to-end training result) by",
             "  # `python -m validation.components.derive --write`; each number's source is on its line, and",
             f"  # docs/devices/{device_name}.md gives every data point against the model."]
    lines += _WHOSE[device_name].rstrip("\n").split("\n") if _WHOSE[device_name] else []
    lines += [f'  source: "{eff.source}"', "  compute:",
              f"    # matmul ceiling: {_GEMM[fam][0]};",
              f"    # half_flops: least squares (curve x alignment_factor) over {_GEMM[fam][1]}",
              f"    matmul: {{peak_fraction: {_g(c['matmul'].peak_fraction)}, half_flops: {_g(c['matmul'].half_flops)}}}",
              "    # conv: matmul ceiling x 0.70/0.83 (efficiency/gpu.yaml conv/matmul ratio): no conv component data",
              f"    conv: {{peak_fraction: {_g(c['conv'].peak_fraction)}, half_flops: {_g(c['conv'].half_flops)}}}",
              "    # attention: generic curve for a stack naming no family below = FA2 fwd+bwd on model FLOPs,",
              "    # 3 / (1/fw + 2.5/bw) of attention_kernels.fa2 (D)",
              f"    attention: {{peak_fraction: {_g(c['attention'].peak_fraction)}, half_flops: {_g(c['attention'].half_flops)}}}",
              "    # vector classes: GPU default (efficiency/gpu.yaml); memory-bound, no component data on their compute"]
    lines += [f"    {k}: {{peak_fraction: {_g(c[k].peak_fraction)}, half_flops: {_g(c[k].half_flops)}}}" for k in _VECTOR]
    return "\n".join(lines + _rest(device_name, eff, fam)) + "\n"


def _sustained(eff: Efficiency) -> list[str]:
    """The sustained matmul ceilings per dtype (derive.SUSTAINED_MATMUL), when the device has them."""
    if not eff.dtype_peak_fraction:
        return []
    cells = ", ".join(f"{k}: {_g(v)}" for k, v in eff.dtype_peak_fraction.items())
    return [f"  dtype_peak_fraction: {{{cells}}}  # sustained under load, back-to-back random-data GEMMs: H200 run "
            "bf16 median 668 TF, fp8 1,241 TF (components-nvidia-h200.md, V); the matmul curve's ceiling is the "
            "burst upper bound (derive.SUSTAINED_MATMUL)"]


def _rest(device_name: str, eff: Efficiency, fam: str) -> list[str]:
    link_key = "a100" if fam == "a100" else device_name
    lines = [f"  memory_bandwidth_fraction: {_g(eff.memory_bandwidth_fraction)}  # {_MEM[device_name]}",
             f"  memory_half_bytes: {_g(eff.memory_half_bytes)}  # GPU default (efficiency/gpu.yaml): 3 has no small-transfer sweep",
             f"  launch_overhead_s: {_g(eff.launch_overhead_s)}  # GPU-side floor per kernel: CUDA-graph replay ~4 us, H100 [PYPTX] 5 (V2; "
             "U on A100); host dispatch is the stack's host_dispatch_s",
             f"  link_bandwidth_fraction: {_g(eff.link_bandwidth_fraction)}  # {_LINK[link_key]}",
             f"  link_latency_scale: {_g(eff.link_latency_scale)}  # not fitted: degenerate with link_half_bytes at one group size (both add a time per ring step); "
             "per-step latency = link spec's NCCL-TUNE value",
             f"  link_half_bytes: {_g(eff.link_half_bytes)}  # {_HALF[link_key]}",
             f"  link_fractions: {{{', '.join(f'{k}: {_g(v)}' for k, v in eff.link_fractions.items())}}}  # "
             + ("all-reduce busbw 192 GB/s of 8 x 25, DGX-A100 8x HDR [NC-812] 4c (V)" if fam == "a100" else
                "46-48 GB/s per NDR NIC of 50 (NCCL_ALGO=RING, 2 nodes) [NT-290] 4c (V)"),
             f"  sustained_clock_fraction: {_g(eff.sustained_clock_fraction)}  # the component ceilings already ran at the "
             "benchmark's clock; 8's figures are U",
             *_sustained(eff),
             "  attention_kernels:  # fraction of dense bf16 peak on executed FLOPs (fwd 4BS^2HD, /2 causal; bwd 2.5x fwd)"]
    for name, k in eff.attention_kernels.items():
        lines.append(f"    {name}: {{fw_peak_fraction: {_g(k.fw_peak_fraction)}, bw_peak_fraction: {_g(k.bw_peak_fraction)}, "
                     f"half_seq: {_g(k.half_seq)}, causal_half_seq: {_g(k.causal_half_seq)},")
        lines.append(f'      source: "{k.source}"}}')
    return lines


def write(device_name: str, block: str) -> None:
    """Replace the ``efficiency:`` block (the last top-level key) of the device file with ``block``."""
    path = device_file(device_name)
    text = path.read_text(encoding="utf-8")
    head, sep, _ = text.partition("\nefficiency:")
    if not sep:
        raise SystemExit(f"{path}: no top-level 'efficiency:' block to replace")
    path.write_text(head + "\n" + block, encoding="utf-8")
