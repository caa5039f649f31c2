"""Figures of one step: where the time goes, what fills each rank's memory, the pipeline Gantt chart."""

from __future__ import annotations

from simtrain.errors import SimtrainError
from simtrain.report.format import format_seconds
from simtrain.report.plot_base import BREAKDOWN_COLOURS, MEMORY_COLOURS, PALETTE, finish, new_figure
from simtrain.report.step_report import BREAKDOWN_KEYS

__all__ = ["breakdown", "memory_stack", "stage_memory_reports", "gantt", "MEMORY_TERMS"]

#: the stacked terms of a memory bar, bottom to top (MemoryReport fields; "reserve" = reserved − allocated)
MEMORY_TERMS = ("params", "grads", "optimizer", "activations", "buffers", "overhead", "reserve")


def _usable(report) -> None:
    if report.step_time_s != report.step_time_s or not report.time_breakdown_s:
        why = "; ".join(report.reasons) or "no step time"
        raise SimtrainError(f"cannot draw an infeasible step ({report.model_name} on {report.cluster_name}): {why}")


def breakdown(report, *, path=None):
    """Figure: one horizontal bar of the step split into StepReport.time_breakdown_s, in ms (in s
    for a step of a second or more), each part labelled with its duration and share (the parts sum
    to the step time when no data stall hides work)."""
    _usable(report)
    fig, ax = new_figure(8.0, 2.8)
    scale, unit = (1.0, "seconds") if report.step_time_s >= 1.0 else (1e3, "milliseconds")
    left = 0.0
    for key in BREAKDOWN_KEYS:
        seconds = report.time_breakdown_s.get(key, 0.0)
        if seconds <= 0:
            continue
        ax.barh([0], [seconds * scale], left=left, color=BREAKDOWN_COLOURS[key], edgecolor="white",
                label=f"{key} {format_seconds(seconds)} ({100 * seconds / report.step_time_s:.0f}%)")
        left += seconds * scale
    ax.axvline(report.step_time_s * scale, color="black", ls="--", lw=1)
    ax.set_yticks([])
    ax.set_xlabel(f"{unit} per step")
    ax.set_title(f"step time {format_seconds(report.step_time_s)}: {report.model_name} on {report.cluster_name} "
                 f"— bottleneck {report.bottleneck}", fontsize=10)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=3, frameon=False)
    return finish(fig, path)


def stage_memory_reports(model, cluster, cfg) -> list:
    """The MemoryReport of every pipeline stage (one rank per stage) of the job, for memory_stack."""
    from simtrain.estimator import program_of
    from simtrain.inputs import as_cluster, as_config, as_model
    from simtrain.parallel.memory_plan import stage_memories
    from simtrain.resolve import resolve
    r = resolve(as_model(model), as_cluster(cluster), as_config(cfg))  # as st.estimate resolves its inputs
    program = program_of(r)
    if isinstance(program, list):
        raise SimtrainError("no per-rank program: " + "; ".join(program))
    return list(stage_memories(r.model, r.cluster, r.cfg, program))


def _memory_terms(m) -> dict[str, float]:
    return {"params": m.params_bytes, "grads": m.grads_bytes, "optimizer": m.optimizer_bytes,
            "activations": m.activations_bytes, "buffers": m.buffers_bytes, "overhead": m.overhead_bytes,
            "reserve": m.reserve_bytes}


def memory_stack(report_or_memories, *, path=None):
    """Figure: per-rank memory as stacked bars (params / grads / optimizer / activations / buffers /
    overhead allowance / allocator reserve) against the usable capacity line. Takes a StepReport
    (its peak rank) or a list of MemoryReport (e.g. :func:`stage_memory_reports`: one bar a stage)."""
    mems = getattr(report_or_memories, "memory", report_or_memories)
    if mems is None:
        raise SimtrainError("the report has no memory (infeasible layout): nothing to stack")
    mems = [mems] if not isinstance(mems, (list, tuple)) else list(mems)
    fig, ax = new_figure(max(4.5, 1.2 * len(mems) + 3.5), 4.5)
    gib, xs = float(2**30), list(range(len(mems)))
    bottoms = [0.0] * len(mems)
    for term in MEMORY_TERMS:
        heights = [_memory_terms(m)[term] / gib for m in mems]
        if any(h > 0 for h in heights):
            ax.bar(xs, heights, bottom=bottoms, color=MEMORY_COLOURS[term], edgecolor="white", width=0.6,
                   label=term)
            bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    cap = mems[0].capacity_bytes / gib
    ax.axhline(cap, color="black", ls="--", lw=1.2)
    ax.annotate(f"usable capacity {cap:.1f} GiB", (xs[-1] + 0.3, cap), ha="right", va="bottom", fontsize=8)
    ax.set_xticks(xs, [f"rank {m.rank}\nstage {m.stage}" for m in mems], fontsize=8)
    ax.set_ylabel("GiB per device")
    fits = all(m.fits for m in mems)
    ax.set_title(f"memory per rank (reserved peak {max(m.reserved_bytes for m in mems) / gib:.1f} GiB; "
                 f"{'fits' if fits else 'DOES NOT FIT'})", fontsize=10)
    ax.set_ylim(0, max(cap, max(bottoms)) * 1.12)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return finish(fig, path)


def _event_fields(e) -> tuple[int, str, float, float]:
    """(rank, name, start, end) of a timeline event object or a (name, rank, start, end) tuple."""
    if isinstance(e, (tuple, list)):
        name, rank, start, end = e[:4]
        return int(rank), str(name), float(start), float(end)
    start = float(e.start_s)
    end = float(getattr(e, "end_s", start + float(getattr(e, "dur_s", 0.0))))
    return int(e.rank), str(e.name), start, end


def _colour(name: str) -> str:
    first = name.split(" ", 1)[0].lower()
    return {"f": PALETTE[0], "b": PALETTE[1], "w": PALETTE[2], "r": PALETTE[5],
            "send": "#999999", "recv": "#999999"}.get(first, PALETTE[4])


def gantt(timeline, *, path=None, max_labels: int = 64):
    """Figure: the pipeline Gantt chart of a simulated step — one row per rank, one bar per timeline
    event (forward F, backward B, sends and syncs in grey / purple), in milliseconds. Takes a
    ``Timeline`` (``simulate(...).timeline``), its events, or (name, rank, start, end) tuples."""
    events = getattr(timeline, "events", timeline)
    rows = [_event_fields(e) for e in events]
    if not rows:
        raise SimtrainError("the timeline has no events to draw")
    ranks = sorted({r for r, *_ in rows})
    fig, ax = new_figure(9.0, 1.0 + 0.7 * len(ranks))
    labelled = 0
    for rank, name, start, end in rows:
        y = ranks.index(rank)
        compute = name.split(" ", 1)[0] in ("F", "B", "W", "R")
        height = 0.7 if compute else 0.25
        ax.barh([y + (0 if compute else 0.42)], [(end - start) * 1e3], left=start * 1e3, height=height,
                color=_colour(name), edgecolor="white", linewidth=0.5)
        if compute and labelled < max_labels:
            ax.text((start + end) / 2 * 1e3, y, name.split(" c", 1)[0].replace(" mb", ""), ha="center",
                    va="center", fontsize=7, color="white", clip_on=True)
            labelled += 1
    ax.set_yticks(range(len(ranks)), [f"rank {r}" for r in ranks])
    ax.invert_yaxis()
    ax.set_xlabel("milliseconds")
    end_ms = max(end for *_, end in rows) * 1e3
    ax.set_title(f"pipeline timeline: {len(ranks)} ranks, {end_ms:.4g} ms (F forward, B backward; "
                 "thin bars: sends / syncs)", fontsize=10)
    ax.grid(True, axis="x", alpha=0.3)
    return finish(fig, path)
