"""docs/devices/<device>.md: every efficiency number of a shipped profile with its component source
and mark, every data point against the model, and the plots (written by ``plots.py``)."""

from __future__ import annotations

from pathlib import Path

import simtrain as st
from simtrain.cost.compute import device_efficiency
from validation.components import data, derive, model
from validation.components.plots import DOCS, plot_device

__all__ = ["write_device_doc", "write_index", "number_table"]

_A100, _H100 = "a100-sxm4-80gb", "h100-sxm5-80gb"


def _sources(name: str) -> dict[str, tuple[str, str]]:
    """(source, mark) of each number by field; A100-40GB inherits A100-80GB's rows (U for it)."""
    a100, own = name.startswith("a100"), name in (_A100, _H100, "h200-sxm-141gb")
    u = "" if own else " (A100-80GB data; U for the 40 GB part)"
    link = ("[AZ-A100] + [MLE-NET] §4a sweeps >= 16 MiB" if a100 else
            "§4b ring rows [NT-212]" if name == _H100 else "§4b ring rows [MLE-NET]")
    return {
        "matmul.peak_fraction": ("joint fit with half_flops over the GEMM points, at most the MAMF best shape / peak "
                                 "[MLE-ACC] §1a" + u, "V" if own else "U"),
        "matmul.half_flops": (("[AZ-A100] §1b square sweep + §1c shapes" if a100 else
                               "[ZZC79] §1b bf16/fp16 sweep (U), [PYPTX], [MAG], [CHILLEE] §1a") + u,
                              ("V" if own else "U") if a100 else "U"),
        "conv.peak_fraction": ("matmul ceiling × 0.70/0.83 (efficiency/gpu.yaml ratio); no conv data", "D"),
        "attention.peak_fraction": ("FA2 family fwd+bwd on model FLOPs: 3/(1/fw + 2.5/bw)", "D"),
        "vector classes": ("GPU default efficiency/gpu.yaml (memory-bound); no component data", "default"),
        "memory_bandwidth_fraction": (f"BabelStream triad §3 [{'AZ-A100' if a100 else 'AZ-H100' if name == _H100 else 'AZ-H200'}]" + u,
                                      "V" if own else "U"),
        "memory_half_bytes": ("GPU default efficiency/gpu.yaml; §3 has no size sweep", "default"),
        "launch_overhead_s": ("CUDA-graph replay floor ≈4 µs per kernel, H100 [PYPTX] §5", "V2" if not a100 else "U"),
        "link_bandwidth_fraction": (link + u, "V" if own else "U"),
        "link_latency_scale": ("not fitted (degenerate with link_half_bytes in the model; see derive.py)", "—"),
        "link_half_bytes": (("ramp of the §4a sweeps" if a100 else "shape of the §4a NVLS sweep (ramp taken for ring)") + u,
                            "V" if own and a100 else "U"),
        "sustained_clock_fraction": ("1.0: ceilings measured at the benchmark's clock; §8 figures U, not applied", "—"),
        "link_fractions": (("DGX-A100 8× HDR all-reduce 192 of 200 GB/s [NC-812] §4c" if a100 else
                            "NDR ring 46–48 of 50 GB/s per NIC [NT-290] §4c"), "V"),
    }


def number_table(name: str, eff) -> list[str]:
    src = _sources(name)
    c = eff.compute
    values = {"matmul.peak_fraction": c["matmul"].peak_fraction, "matmul.half_flops": f"{c['matmul'].half_flops:.3g}",
              "conv.peak_fraction": c["conv"].peak_fraction, "attention.peak_fraction": c["attention"].peak_fraction,
              "vector classes": "0.5 (half_flops 0)", "memory_bandwidth_fraction": eff.memory_bandwidth_fraction,
              "memory_half_bytes": f"{eff.memory_half_bytes:.3g}", "launch_overhead_s": f"{eff.launch_overhead_s:.3g}",
              "link_bandwidth_fraction": eff.link_bandwidth_fraction, "link_latency_scale": eff.link_latency_scale,
              "link_half_bytes": f"{eff.link_half_bytes:.3g}", "sustained_clock_fraction": eff.sustained_clock_fraction,
              "link_fractions": ", ".join(f"{k} {v}" for k, v in eff.link_fractions.items())}
    lines = ["| number | value | source | mark |", "|---|---|---|---|"]
    lines += [f"| `{k}` | {v} | {src[k][0]} | {src[k][1]} |" for k, v in values.items()]
    for kname, k in eff.attention_kernels.items():
        mark = "V2" if kname in ("fa3", "fa2", "cudnn") and not name.startswith("a100") else "V/D" if kname == "triton" else "D/U"
        lines.append(f"| `attention_kernels.{kname}` | fw {k.fw_peak_fraction}, bw {k.bw_peak_fraction}, half_seq "
                     f"{k.half_seq:g}, causal_half_seq {k.causal_half_seq:g} | {k.source} | {mark} |")
    return lines


def _points(name: str, eff) -> list[str]:
    src = data.DATA_DEVICE[name]
    rows = model.compare(name, eff, src)
    if src == "h200-sxm-141gb":
        rows = [r for r in model.compare(name, eff, _H100) if r.category in ("gemm", "attention")] + rows
    lines = ["| category | point | measured | modelled | error | unit | source | mark | fitted |",
             "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r.category} | {r.label} | {r.measured:.4g} | {r.modelled:.4g} | {100 * r.error:+.1f}% | {r.unit} | "
              f"[{r.source}] | {r.mark} | {'yes' if r.fit else 'no'} |" for r in rows]
    return lines


def write_device_doc(name: str, out_dir: Path = DOCS) -> Path:
    eff = device_efficiency(st.load_device(name))
    dev = st.load_device(name)
    text = [f"# {name}: efficiency profile from component measurements", "",
            f"{dev.description}. The `efficiency:` block of `hardware_specs/devices/{name}.yaml` is derived by",
            "`python -m validation.components.derive --write` from `/work/shared/reference/components.md` only",
            "(no end-to-end training result); `tests/unit/test_component_profiles.py` checks it against the data.",
            "Marks: V primary, V2 secondary, U uncertain, D derived here, default = GPU default kept.", "",
            "## Numbers", "", *number_table(name, eff), "",
            "## Plots", "", f"![GEMM]({name}-gemm.png)", "", f"![attention]({name}-attention.png)", "",
            f"![all-reduce]({name}-allreduce.png)", "",
            "## Known misses", "", *_misses(name), "",
            "## Every data point against the model", "",
            "(NVLS all-reduce sweeps are compared on their shape, busbw over the sweep's largest-message busbw.)", "",
            *_points(name, eff), "", "## Fit report", "", "```", derive.report(name, eff), "```", ""]
    path = out_dir / f"{name}.md"
    path.write_text("\n".join(text), encoding="utf-8")
    return path


def _misses(name: str) -> list[str]:
    out = ["* Tall-skinny GEMM 802816×192×768 sits at the roofline ridge: the model's max(compute, memory)",
           "  predicts it at the ceiling (+70 % on A100, +115–132 % fp8 on Hopper).",
           "* All-reduce below 16 MiB: the model is slower than NCCL (32 KiB −35…−72 %); `link_half_bytes`",
           "  (a per-rank chunk size) acts as a fixed time per ring step and cannot follow NCCL's",
           "  size-dependent protocol choice."]
    if not name.startswith("a100"):
        out += ["* fp8 GEMMs run at the bf16 matmul curve (one curve per class): +15–22 % at large sizes.",
                "* NVLS all-reduce (NCCL's default on NVSwitch gen 3): the estimator's node topology runs ring/tree,",
                "  −23…−25 % at 8–16 GiB; marking the switch NVLS-capable (`in_network_reduction`) gives +32…+35 %."]
    return out


def write_index(out_dir: Path = DOCS) -> Path:
    lines = ["# Device efficiency profiles from component measurements", "",
             "Each page lists every number of a device's `efficiency:` block with its component source",
             "(components.md row and source key) and mark, and plots the modelled GEMM, fused-attention and",
             "all-reduce curves against the data. Regenerate with `python -m validation.components.derive --write`",
             "then `python -m validation.components.docs`.", "",
             "| device | matmul ceiling | HBM fraction | link fraction | kernels |", "|---|---|---|---|---|"]
    for name in derive.DEVICES:
        eff = device_efficiency(st.load_device(name))
        lines.append(f"| [{name}]({name}.md) | {eff.compute['matmul'].peak_fraction} | {eff.memory_bandwidth_fraction} | "
                     f"{eff.link_bandwidth_fraction} | {', '.join(eff.attention_kernels)} |")
    path = out_dir / "README.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def main() -> None:
    """Plot every shipped device's curves and write its page and the index (docs/devices/)."""
    for name in derive.DEVICES:
        for p in plot_device(name):
            print("wrote", p)
        print("wrote", write_device_doc(name))
    print("wrote", write_index())


if __name__ == "__main__":
    main()
