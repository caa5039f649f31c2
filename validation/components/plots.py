"""Modelled curves of a shipped device profile against its component data (PNG, matplotlib Agg).

Written with the device pages by ``python -m validation.components.docs`` (docs/devices/*.png, *.md
and README.md).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import simtrain as st  # noqa: E402
from simtrain.cost.compute import device_efficiency  # noqa: E402
from validation.components import data, model  # noqa: E402

__all__ = ["plot_device", "DOCS"]

DOCS = Path(__file__).resolve().parents[2] / "docs" / "devices"
_PHASES = (("fw", False, "fwd non-causal", "-"), ("fw", True, "fwd causal", "--"), ("bw", False, "bwd non-causal", ":"))


def _src(name: str, category: str) -> str:
    src = data.DATA_DEVICE[name]
    return "h100-sxm5-80gb" if src == "h200-sxm-141gb" and category in ("gemm", "attention") else src


def plot_gemm(name: str, eff, path: Path) -> None:
    src = _src(name, "gemm")
    dev = model.device(src)
    pts = [p for p in data.GEMM if p.device == src]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for dtype in sorted({p.dtype for p in pts}):
        sizes = np.unique(np.geomspace(256, 32768, 60).astype(int))
        curve = [model.gemm_tflops(data.GemmPoint(src, dtype, s, s, s, 1, "", "", ""), dev, eff) for s in sizes]
        ax.plot(2.0 * sizes.astype(float) ** 3, curve, label=f"model, square {dtype}")
        sel = [p for p in pts if p.dtype == dtype]
        ax.scatter([2.0 * p.m * p.n * p.k for p in sel], [p.tflops for p in sel], marker="o",
                   label=f"measured {dtype}", zorder=3)
    ax.set(xscale="log", xlabel="GEMM FLOPs (2·M·N·K)", ylabel="TFLOP/s", title=f"{name}: GEMM (components.md §1)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_attention(name: str, eff, path: Path) -> None:
    src = _src(name, "attention")
    dev = model.device(src)
    kernels = list(eff.attention_kernels)
    fig, axes = plt.subplots(1, len(kernels), figsize=(3.2 * len(kernels), 3.6), sharey=True, squeeze=False)
    seqs = np.geomspace(256, 32768, 40).astype(int)
    for ax, kname in zip(axes[0], kernels, strict=True):
        k = eff.attention_kernels[kname]
        for phase, causal, label, style in _PHASES:
            curve = [model.attention_tflops(data.AttentionPoint(src, kname, phase, causal, 128, int(s), 1, "", "", ""),
                                            dev, eff, k) for s in seqs]
            ax.plot(seqs, curve, style, color="k", label=f"model {label}")
        for p in (q for q in data.ATTENTION if q.device in (src, data.DATA_DEVICE[name]) and q.kernel == kname):
            marker = {"fw": "o", "bw": "s", "fwbw": "*"}[p.phase]
            ax.scatter(p.seq, p.tflops, marker=marker, facecolors="none" if p.causal else "C0",
                       edgecolors="C3" if not p.fit else "C0", zorder=3)
        ax.set(xscale="log", xlabel="sequence length", title=kname)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("TFLOP/s (executed FLOPs)")
    axes[0][0].legend(fontsize=6, title="o fwd, s bwd, * fwd+bwd; hollow causal; red not fitted",
                      title_fontsize=6)
    fig.suptitle(f"{name}: fused attention (components.md §2)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_allreduce(name: str, eff, path: Path) -> None:
    src = data.DATA_DEVICE[name]
    pts = [p for p in data.BUSBW if p.device == src]
    sizes = np.geomspace(16 * 1024, 16 * 1024 ** 3, 60)
    curve = [model.busbw_gbps(data.BusbwPoint(src, "all_reduce", int(s), 1, "ring", "", "", ""), name, eff)
             for s in sizes]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(sizes, curve, color="k", label="model: 8-GPU all-reduce, node dp group (ring/tree)")
    for (source, algo), marker in zip(sorted({(p.source, p.algorithm) for p in pts}), "osD^v", strict=False):
        sel = [p for p in pts if p.source == source and p.algorithm == algo]
        ax.scatter([p.size_bytes for p in sel], [p.busbw_gbps for p in sel], marker=marker, zorder=3,
                   label=f"measured {algo} [{source}]" + (" (" + ", ".join(sorted({p.kind for p in sel})) + ")"))
    ax.axvline(16 * data.MIB, color="grey", lw=0.8, ls=":")
    ax.set(xscale="log", yscale="log", xlabel="message size S (bytes, nccl-tests)", ylabel="busbw GB/s",
           title=f"{name}: NCCL busbw, one 8-GPU NVSwitch node (§4a/§4b)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_device(name: str, out_dir: Path = DOCS) -> list[Path]:
    """The three PNGs of ``name``'s shipped profile; returns their paths."""
    eff = device_efficiency(st.load_device(name))
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{name}-{kind}.png" for kind in ("gemm", "attention", "allreduce")]
    plot_gemm(name, eff, paths[0])
    plot_attention(name, eff, paths[1])
    plot_allreduce(name, eff, paths[2])
    return paths
