"""A job's report as one static HTML page: headline, figures (embedded base64 PNG), tables, warnings,
and the assumptions with their sources (every sourced number of the hardware specs, the config).

Self-contained — no script, no stylesheet or image fetched from anywhere — so the page can be mailed,
archived or opened offline. Every piece of text that comes from input (model, spec and cluster names,
reasons, sources) goes through :func:`html.escape`: spec files are untrusted input.
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

from simtrain.errors import SimtrainError
from simtrain.report.format import format_bytes, format_flops_per_s, format_percent, format_quantity
from simtrain.report.step_report import BREAKDOWN_KEYS, ENERGY_MODEL
from simtrain.report.text import fmt_seconds

__all__ = ["html_report", "write_html_report", "sourced_rows", "REPORT_FILE"]

REPORT_FILE = "report.html"

_STYLE = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left}
td.num{text-align:right;font-variant-numeric:tabular-nums}th{background:#f3f3f3}
.warn{color:#a40}.bad{color:#b00;font-weight:bold}figure{margin:1em 0}img{max-width:100%}
figcaption{font-size:.9em;color:#555}small{color:#666}"""


def _e(value) -> str:
    return html.escape(str(value), quote=True)


def _table(headers, rows, num_cols=(), table_id: str | None = None) -> str:
    ident = f' id="{_e(table_id)}"' if table_id else ""
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f'<td class="num">{_e(c)}</td>' if i in num_cols else f"<td>{_e(c)}</td>"
                                    for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _figure(fig, caption: str) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return (f'<figure><img alt="{_e(caption)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{_e(caption)}</figcaption></figure>")


def sourced_rows(spec, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(field path, value, source, mark) of every sourced number inside a spec (a pydantic model),
    depth first: the assumptions a result rests on."""
    from pydantic import BaseModel

    from simtrain.specs.base import Sourced
    out: list[tuple[str, str, str, str]] = []
    if isinstance(spec, Sourced):
        mark = getattr(spec.mark, "value", spec.mark)
        # the unit is in the nearest field name with one ("peak_flops_per_s.bf16" → FLOP/s)
        unit_name = next((p for p in reversed(prefix.split(".")) if "_" in p), prefix)
        return [(prefix, format_quantity(spec.value, unit_name), spec.source, str(mark))]
    if isinstance(spec, BaseModel):
        for name in type(spec).model_fields:
            out += sourced_rows(getattr(spec, name), f"{prefix}.{name}" if prefix else name)
    elif isinstance(spec, dict):
        for key, value in spec.items():
            out += sourced_rows(value, f"{prefix}.{getattr(key, 'value', key)}")
    elif isinstance(spec, (list, tuple)):
        for i, value in enumerate(spec):
            label = getattr(value, "name", i)
            out += sourced_rows(value, f"{prefix}[{label}]")
    return out


def _headline(r) -> str:
    rows = [("model", r.model_name), ("hardware", f"{r.cluster_name} ({r.devices_count} × {r.device_name})"),
            ("engine", r.engine), ("layout", ", ".join(f"{k}={v}" for k, v in r.layout.items())),
            ("feasible", "yes" if r.feasible else "no")]
    if r.step_time_s == r.step_time_s:
        rows += [("step time", fmt_seconds(r.step_time_s)),
                 ("throughput", f"{r.samples_per_s:,.1f} samples/s, {r.tokens_per_s:,.0f} tokens/s"),
                 ("MFU / HFU", f"{format_percent(r.mfu)} / {format_percent(r.hfu)} of "
                               f"{format_flops_per_s(r.peak_flops_per_s)} dense peak"),
                 ("bottleneck", f"{r.bottleneck}: {r.bottleneck_reason}")]
    return _table(["quantity", "value"], rows, table_id="headline")


def _breakdown_table(r) -> str:
    rows = [(k, fmt_seconds(r.time_breakdown_s.get(k, 0.0)),
             format_percent(r.time_breakdown_s.get(k, 0.0) / r.step_time_s)) for k in BREAKDOWN_KEYS]
    return _table(["part", "seconds per step", "share"], rows, num_cols=(1, 2), table_id="breakdown")


def _memory_table(m) -> str:
    rows = [(n, format_bytes(getattr(m, f"{n}_bytes"))) for n in
            ("params", "grads", "optimizer", "activations", "buffers", "overhead", "total", "reserved", "capacity")]
    rows.append(("fits", "yes" if m.fits else f"NO (over by {format_bytes(m.overflow_bytes)})"))
    return _table([f"rank {m.rank}, stage {m.stage}", "bytes"], rows, num_cols=(1,), table_id="memory")


def _ops_and_comm(r) -> str:
    parts = []
    if r.top_ops:
        parts.append("<h2>Top ops of the critical stage</h2>" + _table(
            ["op", "kind", "seconds per step", "share"],
            [(o.name, o.kind, fmt_seconds(o.seconds), format_percent(o.share)) for o in r.top_ops],
            num_cols=(2, 3), table_id="top-ops"))
    if r.comm:
        parts.append("<h2>Communication per step</h2>" + _table(
            ["axis", "total", "exposed", "bytes per rank"],
            [(c.axis, fmt_seconds(c.total_s), fmt_seconds(c.exposed_s), format_bytes(c.bytes_per_rank))
             for c in r.comm], num_cols=(1, 2, 3), table_id="comm"))
    return "".join(parts)


def _flags(r) -> str:
    items = [f'<li class="bad">{_e(x)}</li>' for x in r.reasons]
    items += [f'<li class="warn">{_e(w)}</li>' for w in r.warnings]
    items += [f"<li>{_e(n)}</li>" for n in r.notes]
    return f'<h2>Warnings and notes</h2><ul id="warnings">{"".join(items)}</ul>' if items else ""


def _assumptions(cluster, cfg) -> str:
    parts = ["<h2>Assumptions and their sources</h2>",
             f"<p><small>Energy model: {_e(ENERGY_MODEL)} MFU and HFU follow PaLM (Chowdhery et al. 2022, "
             "App. B): model FLOPs (FMA = 2, recomputation excluded) over step time × devices × dense peak."
             "</small></p>"]
    if cluster is not None:
        parts.append(_table(["spec field", "value", "source", "mark"],
                            [(f"device.{a}", b, c, d) for a, b, c, d in sourced_rows(cluster.device)]
                            + [(f"node.{a}", b, c, d) for a, b, c, d in sourced_rows(cluster.node, "")
                               if not a.startswith("device")]
                            + [(f"network.{a}", b, c, d) for a, b, c, d in sourced_rows(cluster.network)],
                            table_id="sources"))
    if cfg is not None:
        fields = cfg.model_dump(exclude_none=True)
        parts.append("<h3>Training configuration</h3>" + _table(
            ["field", "value"], [(k, v) for k, v in sorted(fields.items())], table_id="config"))
    return "".join(parts)


def _figures(r, model, cluster, cfg, timeline) -> str:
    from simtrain.report import plot
    figs = []
    if r.step_time_s == r.step_time_s and r.time_breakdown_s:
        figs.append(_figure(plot.breakdown(r), "where the step time goes"))
    if r.memory is not None:
        mems = plot.stage_memory_reports(model, cluster, cfg) if model is not None and cluster is not None \
            and cfg is not None else r.memory
        figs.append(_figure(plot.memory_stack(mems), "memory per rank against usable capacity"))
    if model is not None and cluster is not None and r.step_time_s == r.step_time_s:
        figs.append(_figure(plot.roofline(model, cluster.device, cfg, report=r), "roofline with the model's ops"))
    if timeline is not None and getattr(timeline, "events", timeline):
        figs.append(_figure(plot.gantt(timeline), "pipeline timeline of the simulated step"))
    return "<h2>Figures</h2>" + "".join(figs) if figs else ""


def html_report(report, *, model=None, cluster=None, cfg=None, timeline=None, title: str | None = None) -> str:
    """The page as a string. ``model``, ``cluster`` and ``cfg`` (what the report was computed from)
    add the per-stage memory figure, the roofline, the spec sources and the config; ``timeline``
    (``simulate(...).timeline``) adds the Gantt chart."""
    r = report
    title = title or f"simtrain report: {r.model_name} on {r.cluster_name}"
    body = [f"<h1>{_e(title)}</h1>", _headline(r)]
    if r.step_time_s == r.step_time_s and r.time_breakdown_s:
        body.append("<h2>Where the time goes</h2>" + _breakdown_table(r))
    if r.memory is not None:
        body.append("<h2>Memory of the peak device</h2>" + _memory_table(r.memory))
    body += [_ops_and_comm(r), _flags(r), _figures(r, model, cluster, cfg, timeline), _assumptions(cluster, cfg)]
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
            f"<style>{_STYLE}</style></head><body>{''.join(body)}</body></html>\n")


def write_html_report(report, out_dir, **kwargs) -> Path:
    """Write :func:`html_report` to ``out_dir/report.html`` (creating the folder); return its path."""
    from simtrain.outputs import check_output_path
    target = check_output_path(out_dir, "out_dir", folder=True, inside=REPORT_FILE) / REPORT_FILE
    try:
        target.write_text(html_report(report, **kwargs), encoding="utf-8")
    except OSError as err:
        raise SimtrainError(f"{target}: cannot write the report: {err}") from err
    return target
