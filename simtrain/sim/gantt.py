"""A pipeline Gantt chart of a simulated step (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["gantt_png", "slice_colour"]

_COLOURS = {"F": "#4C72B0", "B": "#55A868", "recompute": "#DD8452", "optimizer": "#8172B3",
            "comm": "#C44E52", "other": "#999999", "I": "#8FD19E", "W": "#2E6B3A", "Fo": "#64B5CD", "Bo": "#3B8F63"}
"""Split schedules (parallel/schedule.py ``TASK_KINDS``): input-gradient backward light green, weight
pass dark green; an overlapped pair's forward light blue, its backward teal."""


def slice_colour(name: str, lane: str) -> str:
    """Forward blue, backward green, recomputation orange, optimizer purple, communication red (a
    step prefix "s3 " or "s3 eval " is skipped); the split schedules' kinds their own shades."""
    if lane != "compute":
        return _COLOURS["comm"]
    words = name.split()
    if "recompute" in words:
        return _COLOURS["recompute"]
    for word in words:
        if word in ("F", "B", "I", "W", "Fo", "Bo", "optimizer"):
            return _COLOURS[word]
    return _COLOURS["other"]


_LABELS = {"F": "forward", "Fo": "forward (overlapped pair)", "B": "backward", "I": "input-grad backward",
           "W": "weight-grad backward", "Bo": "backward (overlapped pair)", "recompute": "recompute",
           "optimizer": "optimizer", "comm": "communication", "other": "other"}


def _legend(ax, used: set[str]) -> None:
    """One legend entry per colour the chart uses, right of the axis (a title would be cut off)."""
    from matplotlib.patches import Patch
    handles = [Patch(color=c, label=_LABELS[k]) for k, c in _COLOURS.items() if c in used]
    ax.legend(handles=handles, loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8, frameon=False)


def gantt_png(timeline, path: Path, lanes: tuple[str, ...], dpi: int) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ranks = sorted({e.rank for e in timeline.events})
    rows = [(r, ln) for r in ranks for ln in lanes]
    row_of = {key: i for i, key in enumerate(rows)}
    bars: dict[int, list[tuple[float, float]]] = {}
    colours: dict[int, list[str]] = {}
    for e in timeline.events:
        i = row_of.get((e.rank, e.lane))
        if i is None:
            continue
        bars.setdefault(i, []).append((e.start_s * 1e3, e.dur_s * 1e3))
        colours.setdefault(i, []).append(slice_colour(e.name, e.lane))
    fig, ax = plt.subplots(figsize=(12, 1.0 + 0.4 * max(1, len(rows))))
    for i, spans in bars.items():
        ax.broken_barh(spans, (i - 0.4, 0.8), facecolors=colours[i], edgecolor="white", linewidth=0.3)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"rank {r}" if len(lanes) == 1 else f"rank {r} {ln}" for r, ln in rows])
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    ax.set_title("simulated step")
    _legend(ax, {c for row in colours.values() for c in row})
    fig.tight_layout()
    fig.savefig(path, dpi=dpi, format=Path(path).suffix.lstrip(".").lower() or "png",
                bbox_inches="tight")
    plt.close(fig)
    return path
