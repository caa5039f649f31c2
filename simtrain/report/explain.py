"""The bottleneck verdict and its one-sentence explanation; top ops; per-axis communication."""

from __future__ import annotations

from collections import defaultdict

from simtrain.report.step_report import CommReport, OpTime

__all__ = ["bottleneck_of", "top_ops", "compute_by_class", "comm_reports"]


def top_ops(stage, micro_batches: int, n: int = 10) -> tuple[OpTime, ...]:
    """The ``n`` most expensive ops of the critical stage per step (all micro-batches)."""
    total = sum(t for _, _, t, _ in stage.op_times) or 1.0
    ranked = sorted(stage.op_times, key=lambda x: -x[2])[:n]
    return tuple(OpTime(name, kind, t * micro_batches, t / total) for name, kind, t, _ in ranked)


def compute_by_class(stage, micro_batches: int) -> dict[str, float]:
    """Seconds per step of the critical stage's ops by op class (fw + bw + recompute)."""
    out: dict[str, float] = defaultdict(float)
    for _, _, t, op_class in stage.op_times:
        out[op_class] += t * micro_batches
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def comm_reports(stages, micro_batches: int) -> tuple[CommReport, ...]:
    """Per axis, on the stage where it costs most: total and exposed seconds per step, bytes per rank."""
    best: dict[str, CommReport] = {}
    for st in stages:
        acc = defaultdict(lambda: [0.0, 0.0, 0.0])
        for t in st.comm:
            a = acc[t.axis]
            a[0] += t.total_s * micro_batches
            a[1] += t.exposed_s * micro_batches
            a[2] += t.bytes * t.count * micro_batches
        for t in st.step_comm:
            a = acc[t.axis]
            a[0] += t.total_s
            a[1] += t.exposed_s
            a[2] += t.bytes * t.count
        for axis, (tot, exp, byt) in acc.items():
            if axis not in best or tot > best[axis].total_s:
                best[axis] = CommReport(axis, tot, exp, byt)
    return tuple(best[a] for a in sorted(best))


def bottleneck_of(report, crit, data) -> tuple[str, str]:
    """compute | memory_bandwidth | communication | data | bubble, with one sentence of why."""
    b, step = report.time_breakdown_s, report.step_time_s
    if step <= 0:
        return "compute", "empty step"
    busy = b["compute"] + b["recompute"]
    mem_share = crit.memory_bound_s / max(crit.fw_s + crit.bw_s, 1e-30)
    shares = {
        "compute": busy * (1 - mem_share) + b["optimizer"] * 0.0,
        "memory_bandwidth": busy * mem_share + b["optimizer"],
        "communication": b["comm_exposed"],
        "data": b["data_stall"],
        "bubble": b["pipeline_bubble"],
    }
    name = max(shares, key=shares.get)
    pct = 100.0 * shares[name] / step
    why = {
        "compute": f"{pct:.0f}% of the step is compute-bound math; the matmuls run at "
                   f"{100 * report.hfu:.0f}% of the {report.peak_flops_per_s / 1e12:.0f} TFLOP/s dense peak (HFU)",
        "memory_bandwidth": f"{pct:.0f}% of the step is ops limited by memory bandwidth "
                            f"(elementwise, norms, optimizer) rather than by FLOP/s",
        "communication": f"{pct:.0f}% of the step waits on communication nothing overlaps "
                         f"({', '.join(_exposed_parts(report))})",
        "data": f"the input pipeline's {data.limiting_stage} stage cannot keep up: the device idles "
                f"{pct:.0f}% of the step (utilization {100 * data.utilization:.0f}%)",
        "bubble": f"{pct:.0f}% of the step is pipeline bubble: too few micro-batches "
                  f"({report.layout.get('micro_batches')}) for {report.layout.get('pp')} stages",
    }[name]
    return name, why


def _exposed_parts(report) -> list[str]:
    """Each axis's exposed communication, and the wait for the slowest rank where there is one."""
    parts = [f"{c.axis} {c.exposed_s * 1e3:.1f} ms" for c in report.comm if c.exposed_s > 0]
    if report.sync_wait_s > 0:
        parts.append(f"{report.sync_wait_s * 1e3:.1f} ms waiting for the slowest rank")
    return parts
