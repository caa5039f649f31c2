"""The validation report: one :class:`Case` per (case, metric) pair, a summary per metric, and the
three files — ``<machine>.json`` (every case + machine facts + calibration hash), ``<machine>.md``
(the table, MAPE and worst case per metric) and ``<machine>.png`` (predicted vs measured, log-log).

Error convention: ``error_pct = 100 · (predicted − measured) / basis`` with ``basis`` = measured
unless the case names another one (the data-loader stall is judged against the measured iteration
time, because a stall of almost nothing has no meaningful relative error). MAPE = mean |error_pct|
over the cases of one metric (Makridakis 1993's mean absolute percentage error).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Case", "MetricSummary", "METRICS", "summarise", "write_json", "write_markdown", "write_plot",
           "write_all", "load_cases"]

#: metric → (unit, what it is). Order is the report's order.
METRICS: dict[str, tuple[str, str]] = {
    "step_time": ("s", "one training step (forward, loss, backward, optimizer), one device"),
    "step_time_plain": ("s", "the same step predicted from st.calibrate's device alone (no in-step per-op cost)"),
    "step_time_unseen": ("s", "one training step of a model no calibration step sees (validation/unseen.py)"),
    "step_time_plain_unseen": ("s", "the unseen models' step predicted from st.calibrate's device alone"),
    "step_time_unseen_runs": ("s", "the unseen models' step after st.calibrate_runs on the zoo's measured steps"),
    "step_time_mix": ("s", "the zoo's step from the profile of the placement-mode mix the calibration met "
                           "(calibrate/modes.py)"),
    "step_time_mix_unseen": ("s", "the unseen models' step from the profile of the placement-mode mix the calibration met"),
    "step_time_modal": ("s", "the zoo's step in one placement mode: the rounds timed in it against that mode's profile"),
    "step_time_modal_unseen": ("s", "the unseen models' step in one placement mode against that mode's profile"),
    "step_time_loo": ("s", "every model's step after st.calibrate_runs on all the other models' steps (leave-one-out)"),
    "flops": ("FLOP", "matrix FLOPs of one step vs torch.utils.flop_counter.FlopCounterMode"),
    "saved_bytes": ("B", "bytes autograd saves for backward vs saved_tensors_hooks"),
    "peak_memory": ("B", "peak allocated device memory vs torch.cuda.max_memory_allocated"),
    "ddp_step": ("s", "DistributedDataParallel step, gloo, 2 processes"),
    "allreduce": ("s", "all-reduce of the whole gradient, gloo, 2 processes"),
    "pipeline_throughput": ("samples/s", "DataLoader + fixed-time compute step"),
    "pipeline_stall": ("s", "time per batch the step waits for data (error relative to the iteration)"),
}


@dataclass(frozen=True)
class Case:
    """One comparison. ``detail`` carries what a reader needs to reproduce or judge it."""

    case: str
    metric: str
    predicted: float
    measured: float
    basis: float | None = None
    """What the error is relative to (None: ``measured``)."""
    detail: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise ValueError(f"unknown metric {self.metric!r}; known: {', '.join(METRICS)}")
        object.__setattr__(self, "detail", dict(self.detail))

    @property
    def unit(self) -> str:
        return METRICS[self.metric][0]

    @property
    def error_pct(self) -> float | None:
        basis = self.measured if self.basis is None else self.basis
        if not (basis and math.isfinite(basis) and math.isfinite(self.predicted) and math.isfinite(self.measured)):
            return None
        return 100.0 * (self.predicted - self.measured) / basis

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(unit=self.unit, error_pct=self.error_pct)
        return d


@dataclass(frozen=True)
class MetricSummary:
    metric: str
    count: int
    mape_pct: float
    worst_case: str
    worst_error_pct: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarise(cases: Iterable[Case]) -> dict[str, MetricSummary]:
    """MAPE and the worst case of each metric that has at least one case with a defined error."""
    out: dict[str, MetricSummary] = {}
    for metric in METRICS:
        mine = [c for c in cases if c.metric == metric and c.error_pct is not None]
        if not mine:
            continue
        worst = max(mine, key=lambda c: abs(c.error_pct))
        mape = sum(abs(c.error_pct) for c in mine) / len(mine)
        out[metric] = MetricSummary(metric, len(mine), mape, worst.case, worst.error_pct)
    return out


def _jsonable(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, Mapping):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


def write_json(path: Path, cases: Sequence[Case], meta: Mapping[str, Any]) -> Path:
    doc = dict(meta, summary={m: s.to_dict() for m, s in summarise(cases).items()},
               cases=[c.to_dict() for c in cases])
    path.write_text(json.dumps(_jsonable(doc), indent=1, sort_keys=False) + "\n", encoding="utf-8")
    return path


def load_cases(path: Path) -> tuple[list[Case], dict[str, Any]]:
    """(cases, everything else) of a report JSON written by :func:`write_json`."""
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    cases = [Case(c["case"], c["metric"], c["predicted"] if c["predicted"] is not None else math.nan,
                  c["measured"] if c["measured"] is not None else math.nan, c.get("basis"), c.get("detail", {}))
             for c in doc.pop("cases")]
    return cases, doc


def _num(x: float, unit: str) -> str:
    from simtrain.report.format import format_bytes, format_seconds
    if not math.isfinite(x):
        return "—"
    if unit == "s":
        return format_seconds(x)
    if unit == "B":
        return format_bytes(x)
    if unit == "FLOP":
        return f"{x:.4g}"
    return f"{x:.4g}"


def _err(e: float | None) -> str:
    return "—" if e is None else f"{e:+.1f} %"


def _md_summary(cases: Sequence[Case], targets: Mapping[str, str]) -> list[str]:
    lines = ["| metric | cases | MAPE | worst case | worst error | target |", "|---|---:|---:|---|---:|---|"]
    for m, s in summarise(cases).items():
        lines.append(f"| {m} | {s.count} | {s.mape_pct:.2f} % | {s.worst_case} | {s.worst_error_pct:+.2f} % "
                     f"| {targets.get(m, '')} |")
    return lines


def _md_table(cases: Sequence[Case]) -> list[str]:
    lines = ["| case | metric | predicted | measured | error |", "|---|---|---:|---:|---:|"]
    for c in cases:
        lines.append(f"| {c.case} | {c.metric} | {_num(c.predicted, c.unit)} | {_num(c.measured, c.unit)} "
                     f"| {_err(c.error_pct)} |")
    return lines


def write_markdown(path: Path, cases: Sequence[Case], meta: Mapping[str, Any], notes: Sequence[str] = (),
                   targets: Mapping[str, str] | None = None,
                   sections: Sequence[tuple[str, Sequence[str]]] = ()) -> Path:
    """Title, machine and calibration facts, the per-metric summary, notes, extra ``sections``
    (title, lines), then every case."""
    facts = meta.get("machine", {})
    cal = meta.get("calibration", {})
    head = [f"# Validation on {meta.get('machine_slug', '?')}", "",
            f"- machine: {facts.get('cpu_model', '?')}, {facts.get('cpu_cores', '?')} cores"
            + (f", GPU {facts['gpu_name']}" if facts.get("gpu_name") else "")
            + f"; torch {facts.get('torch_version', '?')}; {facts.get('date', '')}",
            f"- command: `{meta.get('command', '')}` ({meta.get('mode', '')} mode, "
            f"{meta.get('runtime_s', 0):.0f} s)",
            f"- calibration: {cal.get('device', '?')} (key {str(cal.get('key', ''))[:16]}, measurements "
            f"{str(cal.get('measurements_hash', ''))[:16]}, {cal.get('threads', '?')} threads); fitted only to "
            "microbenchmarks, never to the zoo's own step times", ""]
    body = ["## Summary", ""] + _md_summary(cases, targets or {}) + [""]
    if notes:
        body += ["## Notes", ""] + [f"- {n}" for n in notes] + [""]
    for title, lines in sections:
        body += [f"## {title}", ""] + list(lines) + [""]
    body += ["## Every case", ""] + _md_table(cases) + [""]
    path.write_text("\n".join(head + body), encoding="utf-8")
    return path


_PANELS = (("time (s)", ("step_time", "step_time_unseen", "ddp_step", "allreduce", "pipeline_stall")),
           ("count / rate", ("flops", "saved_bytes", "peak_memory", "pipeline_throughput")))


def write_plot(path: Path, cases: Sequence[Case], title: str) -> Path:
    """Predicted vs measured, log-log, one colour per metric, the y = x line and ±10 % bands."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    colours = dict(zip(METRICS, plt.get_cmap("tab20").colors, strict=False))
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.5))
    for ax, (label, metrics) in zip(axes, _PANELS, strict=True):
        pts = [c for c in cases if c.metric in metrics and c.predicted > 0 and c.measured > 0]
        for m in metrics:
            mine = [c for c in pts if c.metric == m]
            if mine:
                ax.scatter([c.measured for c in mine], [c.predicted for c in mine], s=28, color=colours[m],
                           label=f"{m} ({METRICS[m][0]})", alpha=0.85, edgecolors="black", linewidths=0.4)
        if pts:
            lo = min(min(c.measured, c.predicted) for c in pts) / 1.5
            hi = max(max(c.measured, c.predicted) for c in pts) * 1.5
            ax.plot([lo, hi], [lo, hi], color="black", lw=1, label="y = x")
            for f in (0.9, 1.1):
                ax.plot([lo, hi], [lo * f, hi * f], color="grey", lw=0.6, ls="--")
            ax.set_xlim(lo, hi)
            ax.set_ylim(lo, hi)
            ax.legend(fontsize=8, loc="upper left")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(f"measured, {label}")
        ax.set_ylabel(f"predicted, {label}")
        ax.grid(True, which="both", alpha=0.25)
    fig.suptitle(title + "  (dashed: ±10 %)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_all(out_dir: Path, slug: str, cases: Sequence[Case], meta: Mapping[str, Any],
              notes: Sequence[str] = (), targets: Mapping[str, str] | None = None,
              sections: Sequence[tuple[str, Sequence[str]]] = ()) -> dict[str, Path]:
    """The three report files for machine ``slug`` under ``out_dir``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    meta = dict(meta, machine_slug=slug, notes=list(notes))
    return {"json": write_json(out_dir / f"{slug}.json", cases, meta),
            "md": write_markdown(out_dir / f"{slug}.md", cases, meta, notes, targets, sections),
            "png": write_plot(out_dir / f"{slug}.png", cases, f"simtrain validation — {slug}")}
