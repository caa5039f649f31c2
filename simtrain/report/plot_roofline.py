"""The roofline of one device with a model's ops placed on it.

Roofline model (Williams, Waterman & Patterson, "Roofline: an insightful visual performance model",
CACM 52(4), 2009): attainable FLOP/s = min(peak FLOP/s, arithmetic intensity × memory bandwidth),
arithmetic intensity = FLOPs / bytes moved to and from the device's main memory. The ceilings drawn
are the spec's dense matrix peak (the precision's matmul dtype), its vector peak, and the main
memory bandwidth; each op sits at (its intensity, its FLOPs / the seconds the cost layer gives it),
so the gap under the roof is the efficiency the cost rules charge (cost/op_cost.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

from simtrain.report.plot_base import PALETTE, finish, new_figure

__all__ = ["OpPoint", "op_points", "roofline"]


@dataclass(frozen=True, slots=True)
class OpPoint:
    """One op of one micro-batch on one rank (forward + backward): where it sits on the roofline."""

    name: str
    kind: str
    op_class: str
    flops: float
    bytes_moved: float
    seconds: float

    @property
    def intensity_flops_per_byte(self) -> float:
        return self.flops / self.bytes_moved if self.bytes_moved > 0 else float("inf")

    @property
    def achieved_flops_per_s(self) -> float:
        return self.flops / self.seconds if self.seconds > 0 else 0.0


def _op_bytes(op, micro_batch: int, reg, f) -> float:
    """Main-memory bytes of the op over fw + agrad + wgrad: the same count op_cost() rooflines with
    (activations in the regime's bytes per element, fixed-size bytes, weights once per micro-batch)."""
    total = 0.0
    for phase in ("fw", "agrad", "wgrad"):
        act = getattr(op.act_read, phase) * f.act_read + getattr(op.act_write, phase) * f.act_write
        fixed = getattr(op.fixed_read_bytes, phase) + getattr(op.fixed_write_bytes, phase)
        weights = (getattr(op.weight_read, phase) + getattr(op.weight_write, phase)) * f.weights
        total += (act * reg.act_bytes + fixed * f.act_write) * micro_batch + weights * reg.weight_bytes
    return total


def op_points(model, device, cfg=None) -> list[OpPoint]:
    """Every distinct op of ``model`` (repeated layers counted once) on ``device`` under ``cfg``'s
    precision, micro-batch and tensor parallelism; ops without FLOPs are left out (no intensity)."""
    from simtrain.cost.compute import device_efficiency
    from simtrain.cost.op_cost import op_cost, shard_factors
    from simtrain.cost.precision import regime
    from simtrain.inputs import as_config, as_model
    from simtrain.specs.train import TrainConfig
    cfg = TrainConfig(global_batch_size=1) if cfg is None else as_config(cfg)
    model, device = as_model(model).with_seq_len(cfg.seq_len), _as_device(device)
    reg, eff, mb = regime(cfg.precision), device_efficiency(device), cfg.micro_batch_size
    seen, out = set(), []
    for op in model.ops:
        f = shard_factors(op, cfg.tp, cfg.sequence_parallel, cfg.ep)
        c = op_cost(op, mb, reg, device, eff, cfg.tp, cfg.sequence_parallel, cfg.ep)
        point = OpPoint(op.name, op.kind, str(op.op_class.value), c.fw_flops + c.bw_flops,
                        _op_bytes(op, mb, reg, f), c.fw_s + c.bw_s)
        key = (op.kind, round(point.flops), round(point.bytes_moved))
        if point.flops > 0 and point.bytes_moved > 0 and key not in seen:
            seen.add(key)
            out.append(point)
    return out


def _as_device(value):
    from simtrain.inputs import as_cluster
    from simtrain.specs.hardware import Device
    return value if isinstance(value, Device) else as_cluster(value, "device").device


def _ceilings(ax, device, reg, xs) -> None:
    from simtrain.cost.compute import matrix_peak_flops_per_s
    bw = device.memory_bandwidth_bytes_per_s
    lo, hi = min(xs) / 4, max(xs) * 4
    for peak, label, style in ((matrix_peak_flops_per_s(device, reg.matmul_dtype),
                                f"matrix peak ({reg.matmul_dtype.value})", "-"),
                               (device.vector_peak_flops_per_s, "vector peak", "--")):
        ridge = peak / bw
        ax.plot([lo, max(ridge, lo)], [bw * lo, peak if ridge > lo else bw * lo], color="black", lw=1.6)
        ax.plot([max(ridge, lo), max(hi, ridge * 2)], [peak, peak], color="black", lw=1.6, ls=style)
        # at the ridge, left-aligned: the right end of the flat roof is where the big matmuls' labels go
        ax.annotate(f"{label} {peak / 1e12:.3g} TFLOP/s", (max(ridge, lo), peak), ha="left",
                    va="bottom", fontsize=8, xytext=(4, 2), textcoords="offset points")
    ax.annotate(f"memory {bw / 1e12:.3g} TB/s", (lo * 1.5, bw * lo * 1.5), rotation=0, fontsize=8,
                va="bottom")


def roofline(model, device, cfg=None, *, report=None, label_top: int = 6, path=None):
    """Figure: ``device``'s roofline (a Device, a device or cluster name, or a Cluster) with each
    distinct op of ``model`` placed at (FLOP per byte, achieved FLOP/s); marker area ∝ the op's
    seconds. ``report`` (a StepReport): its top ops are labelled; else the ``label_top`` slowest."""
    from simtrain.cost.precision import regime
    from simtrain.inputs import as_config
    from simtrain.outputs import IMAGE_SUFFIXES, check_output_path
    from simtrain.specs.train import TrainConfig
    if path is not None:  # before any op is costed
        check_output_path(path, "path", IMAGE_SUFFIXES)
    cfg = TrainConfig(global_batch_size=1) if cfg is None else as_config(cfg)
    dev, points = _as_device(device), op_points(model, device, cfg)
    fig, ax = new_figure(8.0, 5.0)
    ax.set_xscale("log")
    ax.set_yscale("log")
    if not points:
        ax.set_title(f"roofline of {dev.name}: no op with FLOPs to place")
        return finish(fig, path)
    xs = [p.intensity_flops_per_byte for p in points]
    _ceilings(ax, dev, regime(cfg.precision), xs)
    classes = sorted({p.op_class for p in points})
    total = sum(p.seconds for p in points) or 1.0
    for i, cls in enumerate(classes):
        mine = [p for p in points if p.op_class == cls]
        ax.scatter([p.intensity_flops_per_byte for p in mine], [p.achieved_flops_per_s for p in mine],
                   s=[20 + 600 * p.seconds / total for p in mine], color=PALETTE[i % len(PALETTE)],
                   alpha=0.75, edgecolor="black", linewidth=0.4, label=cls, zorder=3)
    _label_ops(ax, points, report, label_top)
    ax.set_xlabel("arithmetic intensity (FLOP / byte of main memory)")
    ax.set_ylabel("achieved FLOP/s (fw + bw, one rank)")
    name = getattr(model, "name", str(model))
    ax.set_title(f"roofline: {name} on {dev.name} ({cfg.precision}, micro-batch {cfg.micro_batch_size})",
                 fontsize=10)
    ax.legend(fontsize=8, loc="lower right", title="op class", title_fontsize=8)
    ax.grid(True, which="major", alpha=0.3)
    return finish(fig, path)


def _label_ops(ax, points, report, label_top: int) -> None:
    names = [o.name for o in report.top_ops] if report is not None and report.top_ops else []
    # top ops name repeated layers by pattern ("layers.*/attn/core"): match them as globs
    chosen = [p for p in points if any(fnmatchcase(p.name, n) for n in names)] if names else []
    if not chosen:
        chosen = sorted(points, key=lambda p: -p.seconds)[:label_top]
    placed: set[tuple[float, float]] = set()
    for p in chosen[:label_top]:
        spot = (round(p.intensity_flops_per_byte, 1), round(p.achieved_flops_per_s, -11))
        if spot in placed:  # identical shapes (fc1 / fc2) sit on one point: one label
            continue
        placed.add(spot)
        # labels of the big matmuls crowd one corner: step each one down so none overprints another
        ax.annotate(p.name, (p.intensity_flops_per_byte, p.achieved_flops_per_s), fontsize=7,
                    xytext=(6, -10 - 11 * len(placed)), textcoords="offset points",  # 11 pt: a 7 pt line and a gap
                    arrowprops={"arrowstyle": "-", "color": "#888888", "lw": 0.5})
