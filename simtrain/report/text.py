"""A StepReport as readable text: headline, breakdown, memory, communication, top ops, bottleneck, warnings."""

from __future__ import annotations

from simtrain.report.format import format_bytes as fmt_bytes
from simtrain.report.format import format_flops_per_s, format_seconds
from simtrain.report.step_report import BREAKDOWN_KEYS, StepReport

__all__ = ["render_report"]


def fmt_seconds(s: float) -> str:
    """Durations; long ones in hours and days (time-to-train)."""
    if s != s:
        return "n/a"
    if s >= 86400:
        return f"{s / 86400:.2f} days"
    if s >= 3600:
        return f"{s / 3600:.2f} h"
    return format_seconds(s)


def _headline(r: StepReport) -> list[str]:
    lay = ", ".join(f"{k}={v}" for k, v in r.layout.items())
    lines = [f"simtrain {r.engine}: {r.model_name} on {r.cluster_name} ({r.devices_count} × {r.device_name})",
             f"layout: {lay}" + (f"; stack {r.stack}" if r.stack else "")]
    if not r.feasible and r.step_time_s != r.step_time_s:
        return lines + ["INFEASIBLE:"] + [f"  - {x}" for x in r.reasons] + [
            "what to change: a layout whose degrees divide the devices, the batch and the model (tp, pp, cp, "
            "dp, micro-batch), or no layout at all on the command line, and simtrain picks the fastest that fits"]
    lines += [
        f"step time        {fmt_seconds(r.step_time_s)}",
        f"throughput       {r.samples_per_s:,.1f} samples/s, {r.tokens_per_s:,.0f} tokens/s",
        f"model FLOPs/step {r.model_flops_per_step:.4g} (FMA = 2; attention '{r.attention_flops}')",
        f"achieved         {format_flops_per_s(r.flops_per_device_per_s)} per device",
        f"MFU / HFU        {100 * r.mfu:.1f}% / {100 * r.hfu:.1f}% of {format_flops_per_s(r.peak_flops_per_s)} dense peak",
    ]
    return lines


#: what shrinks each memory term (the largest one names the first thing to try)
_MEMORY_FIXES = {
    "optimizer": "shard the optimizer state: zero_stage 1 or more (or a larger dp to shard it over)",
    "grads": "shard the gradients: zero_stage 2 or 3, or more tp / pp",
    "params": "shard the weights: zero_stage 3, or more tp / pp",
    "activations": "recompute 'selective' or 'full', a smaller micro_batch_size, or more tp (with "
                   "sequence_parallel), cp or pp",
    "buffers": "a smaller micro_batch_size, or fewer prefetched layers under ZeRO-3",
    "overhead": "a smaller memory_overhead_fraction, if the framework really leaves that much free",
    "reserve": "a stack with a smaller allocator reserve / workspace, or the fixes for the other terms",
}


def _what_to_change(r) -> list[str]:
    if r.memory is None or r.memory.fits:
        return []
    term, _ = r.memory.largest_term()
    return [f"what to change: {_MEMORY_FIXES.get(term, 'a layout that spreads the state over more devices')}; "
            "or more devices"]


def _breakdown(r: StepReport) -> list[str]:
    lines = ["", "where the time goes (seconds per step)"]
    for k in BREAKDOWN_KEYS:
        v = r.time_breakdown_s.get(k, 0.0)
        share = 100 * v / r.step_time_s if r.step_time_s > 0 else 0.0
        lines.append(f"  {k:<16} {fmt_seconds(v):>14}  {share:5.1f}%")
    return lines


def _memory(r: StepReport) -> list[str]:
    m = r.memory
    if m is None:
        return []
    term, _ = m.largest_term()
    lines = ["", f"memory of the peak device (rank {m.rank}, pipeline stage {m.stage}; largest term: {term})"]
    for name in ("params", "grads", "optimizer", "activations", "buffers", "overhead"):
        lines.append(f"  {name:<16} {fmt_bytes(getattr(m, name + '_bytes')):>14}")
    verdict = "fits" if m.fits else f"DOES NOT FIT (over by {fmt_bytes(m.overflow_bytes)})"
    lines.append(f"  {'total':<16} {fmt_bytes(m.total_bytes):>14}  allocated")
    how = (f"state + transient × {1 + m.reserve_fraction:.2f} + {fmt_bytes(m.workspace_bytes)} workspace"
           if m.reserve_fraction or m.workspace_bytes else "= total: no allocator model, the overhead allowance instead")
    lines.append(f"  {'reserved':<16} {fmt_bytes(m.reserved_bytes):>14}  of {fmt_bytes(m.capacity_bytes)} usable: "
                 f"{verdict}  ({how})")
    if m.host_prefetch_bytes:
        lines.append(f"  host DRAM prefetch buffers {fmt_bytes(m.host_prefetch_bytes)}")
    return lines


def _comm_and_ops(r: StepReport) -> list[str]:
    lines = []
    if r.comm:
        lines += ["", "communication per step (total / exposed / bytes per rank)"]
        lines += [f"  {c.axis:<4} {fmt_seconds(c.total_s):>12} {fmt_seconds(c.exposed_s):>12} "
                  f"{fmt_bytes(c.bytes_per_rank):>12}" for c in r.comm]
    if r.top_ops:
        lines += ["", "top ops of the critical stage (per step)"]
        lines += [f"  {o.name:<40} {o.kind:<12} {fmt_seconds(o.seconds):>12} {100 * o.share:5.1f}%" for o in r.top_ops[:8]]
    return lines


def _warnings(r: StepReport) -> list[str]:
    """Sanity flags (report/sanity.py), one per line."""
    return ["", "warnings:"] + [f"  ! {w}" for w in r.warnings] if r.warnings else []


def render_report(r: StepReport, tokens: float | None = None) -> str:
    """The whole report as text (used by the CLI)."""
    lines = _headline(r)
    if r.step_time_s == r.step_time_s:
        lines += _breakdown(r) + _memory(r) + _comm_and_ops(r)
        lines += ["", f"bottleneck: {r.bottleneck} — {r.bottleneck_reason}"]
        if not r.feasible:
            lines += ["INFEASIBLE:"] + [f"  - {x}" for x in r.reasons] + _what_to_change(r)
        if tokens:
            t = r.time_to_train(tokens=tokens)
            cost, kwh = r.cost_dollars(duration_s=t), r.energy_kwh(duration_s=t)
            lines.append(f"time to train {tokens:.3g} tokens: {fmt_seconds(t)}"
                         + (f", ${cost:,.0f}" if cost is not None else "")
                         + (f", {kwh:,.0f} kWh device energy" if kwh is not None else ""))
        lines += _warnings(r)
    return "\n".join(lines)
