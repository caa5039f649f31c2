"""One workload across hardware kinds: ``st.compare(model, ["dgx-h100", "tpu-v5p-pod", ...], cfg)``.

One row per hardware: step time, throughput, MFU, whether memory fits, energy and money per step and
per million tokens, the bottleneck, and where the device's numbers come from. A hardware that cannot
run the workload (no peak for the precision, a layout its device count cannot hold, memory that
does not fit) gets a row with ``status`` and ``reason`` saying why, never an exception.

Energy follows StepReport's ENERGY_MODEL (device power only: idle + (TDP − idle) × busy fraction);
cost is devices × seconds × the spec's indicative price per device-hour. Absent inputs give None.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from simtrain.errors import SimtrainError, SpecError

__all__ = ["compare", "COLUMNS", "spec_source"]

#: the columns of compare()'s DataFrame, in order
COLUMNS = (
    "hardware", "kind", "device", "devices", "status", "reason", "step_time_s", "tokens_per_s",
    "samples_per_s", "mfu", "memory_fits", "memory_reserved_bytes", "memory_capacity_bytes",
    "energy_per_step_j", "energy_per_mtoken_kwh", "cost_per_step_dollars", "cost_per_mtoken_dollars",
    "time_to_train_s", "energy_kwh", "cost_dollars", "bottleneck", "peak_flops_per_s", "source",
)


def spec_source(device, dtype: str | None = None) -> str:
    """Where a device's headline numbers come from: its peak (of ``dtype`` when listed, else the
    first), TDP and price sources from the spec file, joined with "; "."""
    peaks = device.peaks_flops_per_s
    key = next((k for k in peaks if str(getattr(k, "value", k)) == dtype), next(iter(peaks)))
    parts = [f"peak {getattr(key, 'value', key)}: {peaks[key].source}"]
    for label, item in (("TDP", device.tdp_w), ("price", device.price_per_hour)):
        if item is not None:
            parts.append(f"{label}: {item.source}")
    return "; ".join(parts)


def _nodes_for(name, nodes) -> int | None:
    if isinstance(nodes, Mapping):
        return nodes.get(str(getattr(name, "name", name)))
    return nodes


def _resolve(hw, nodes):
    """(cluster, None) or (None, reason) for one hardware entry."""
    from simtrain.inputs import as_cluster
    try:
        cluster = as_cluster(hw, "hardware", nodes)
        if nodes is None and isinstance(hw, str) and cluster.nodes_count > 1:
            cluster = cluster.with_nodes(1)  # one node each, see compare()'s docstring
        return cluster, None
    except (SpecError, SimtrainError) as err:
        return None, str(err).replace("\n", "; ")


def _status(report) -> tuple[str, str]:
    if report.step_time_s != report.step_time_s:
        return "cannot run", "; ".join(report.reasons)
    if report.memory is not None and not report.memory.fits:
        return "does not fit", "; ".join(report.reasons)
    return ("ok", "") if report.feasible else ("infeasible", "; ".join(report.reasons))


def _money_and_energy(r, tokens: float | None) -> dict:
    out = dict.fromkeys(("energy_per_step_j", "energy_per_mtoken_kwh", "cost_per_step_dollars",
                         "cost_per_mtoken_dollars", "time_to_train_s", "energy_kwh", "cost_dollars"))
    step = r.step_time_s
    if not step == step or step <= 0:
        return out
    tokens_per_step = r.global_batch_size * r.tokens_per_sample
    kwh, dollars = r.energy_kwh(duration_s=step), r.cost_dollars(duration_s=step)
    if kwh is not None:
        out["energy_per_step_j"] = kwh * 3.6e6
        out["energy_per_mtoken_kwh"] = kwh * 1e6 / tokens_per_step
    if dollars is not None:
        out["cost_per_step_dollars"] = dollars
        out["cost_per_mtoken_dollars"] = dollars * 1e6 / tokens_per_step
    if tokens:
        out.update(time_to_train_s=r.time_to_train(tokens=tokens), energy_kwh=r.energy_kwh(tokens=tokens),
                   cost_dollars=r.cost_dollars(tokens=tokens))
    return out


def _row(hw, model, cfg, nodes, tokens, engine) -> dict:
    cluster, why = _resolve(hw, _nodes_for(hw, nodes))
    label = str(getattr(hw, "name", hw))
    if cluster is None:
        return {"hardware": label, "status": "cannot run", "reason": why}
    run = _engine(engine)
    report = run(model, cluster, cfg)
    status, reason = _status(report)
    dev = cluster.device
    row = {"hardware": label, "kind": dev.kind.value, "device": dev.name, "devices": cluster.devices_count,
           "status": status, "reason": reason, "source": spec_source(dev, str(cfg.precision))}
    if status == "cannot run":
        return row
    row.update(step_time_s=report.step_time_s, tokens_per_s=report.tokens_per_s, samples_per_s=report.samples_per_s,
               mfu=report.mfu, bottleneck=report.bottleneck, peak_flops_per_s=report.peak_flops_per_s,
               memory_fits=None if report.memory is None else report.memory.fits,
               memory_reserved_bytes=None if report.memory is None else report.memory.reserved_bytes,
               memory_capacity_bytes=None if report.memory is None else report.memory.capacity_bytes)
    row.update(_money_and_energy(report, tokens))
    return row


def _engine(engine: str):
    if engine == "estimate":
        from simtrain.estimator import estimate
        return estimate
    if engine == "simulate":
        from simtrain.sim import simulate
        return simulate
    raise SimtrainError(f"engine: expected 'estimate' or 'simulate', got {engine!r}")


def compare(model, hardware: Sequence, cfg, *, nodes: int | Mapping[str, int] | None = None,
            tokens: float | None = None, engine: str = "estimate"):
    """pandas DataFrame, one row per entry of ``hardware`` (cluster or device names, paths, Cluster
    or Device objects), in the order given, columns :data:`COLUMNS`.

    ``nodes``: node count for every cluster (an int) or per name (a mapping); by default a library
    cluster named by string is compared at **one node** (one DGX, one TPU host, one CS-3 system) so
    that one config runs everywhere: the ``devices`` column says how many devices each row uses.
    ``tokens``: also the time, energy and cost to train on that many tokens."""
    import pandas as pd

    from simtrain.inputs import as_config, as_model
    if isinstance(hardware, (str, bytes)) or not isinstance(hardware, Sequence) or not hardware:
        raise SimtrainError("hardware: expected a non-empty list of cluster or device names")
    model, cfg = as_model(model), as_config(cfg)
    _engine(engine)
    rows = [_row(hw, model, cfg, nodes, tokens, engine) for hw in hardware]
    df = pd.DataFrame(rows, columns=list(COLUMNS))
    df["devices"] = df["devices"].astype("Int64")  # integer even where a row has no cluster
    return df


# --- generated docs pages (docs/hardware.md, docs/hardware-comparison.md; tests keep them in sync) ---

DOC_WORKLOAD = {"model": "gpt2-xl", "global_batch_size": 8, "micro_batch_size": 1, "seq_len": 1024,
                "precision": "bf16", "optimizer": "adamw", "tokens": 1e9}
"""The workload of docs/hardware-comparison.md: GPT-2 XL (1.5 B) on one device of each kind."""


def _md_table(headers, rows) -> str:
    def cell(v) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    return "\n".join(lines + ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows])


def hardware_markdown() -> str:
    """docs/hardware.md: every device and cluster of the library with its headline numbers and sources."""
    from simtrain.report.format import format_bytes, format_flops_per_s, format_rate, format_si
    from simtrain.specs.library import library_names, load_cluster, load_device
    rows = []
    for name in library_names("device"):
        d = load_device(name)
        peaks = ", ".join(f"{k.value} {format_flops_per_s(v.value)}" for k, v in d.peaks_flops_per_s.items())
        tier = d.main_tier
        rows.append([name, d.kind.value, d.vendor or "-", peaks, format_bytes(tier.capacity_bytes.value),
                     format_rate(tier.bandwidth_bytes_per_s.value),
                     format_si(d.tdp_w.value, "W") if d.tdp_w else "-",
                     f"${d.price_per_hour.value:g}/h" if d.price_per_hour else "-", spec_source(d, "bf16")])
    clusters = []
    for name in library_names("cluster"):
        c = load_cluster(name)
        clusters.append([name, c.nodes_count, c.node.name, c.devices_count, c.device.name, c.network.topology.value
                         if hasattr(c.network.topology, "value") else c.network.topology])
    return "\n".join([
        "# The hardware library", "",
        "Generated from `hardware_specs/` by `python -m simtrain.report.compare hardware > docs/hardware.md`;",
        "`tests/unit/test_docs_hardware.py` fails when this page and the specs disagree. Peaks are dense",
        "(no 2:4 sparsity); every number's source is in its YAML file (`simtrain specs show NAME`).", "",
        "Sustained ceilings: a device's `efficiency.dtype_peak_fraction` (e.g. `{fp8: 0.63}`) replaces the matmul",
        "curve's `peak_fraction` for matmuls in that dtype (fp8 GEMMs reach a smaller share of their peak than bf16);",
        "`power_limit_w` (≤ `tdp_w`, > `idle_power_w`; `Cluster.with_power_limit(500)`) slows every compute peak by",
        "the clock fraction ((limit − idle) / (tdp − idle))^(1/3) (cube law of CMOS dynamic power), not memory.", "",
        "## Devices", "",
        _md_table(["device", "kind", "vendor", "dense peaks", "main memory", "bandwidth", "TDP", "price",
                   "sources"], rows), "",
        "## Clusters", "",
        _md_table(["cluster", "nodes", "node", "devices", "device", "network"], clusters), ""])


def comparison_markdown() -> str:
    """docs/hardware-comparison.md: DOC_WORKLOAD on one device of every kind in the library."""
    from simtrain.report.format import format_bytes, format_percent, format_seconds
    from simtrain.specs.hardware import Cluster
    from simtrain.specs.library import library_names, load_device
    from simtrain.specs.train import TrainConfig
    w = dict(DOC_WORKLOAD)
    model, tokens = w.pop("model"), w.pop("tokens")
    devices = [Cluster.single(load_device(n)) for n in library_names("device")]
    df = compare(model, devices, TrainConfig(**w), tokens=tokens)

    def f(v, fmt):
        return fmt(float(v)) if v is not None and v == v else "-"
    rows = [[r.hardware.removesuffix("-single"), r.kind, r.status, f(r.step_time_s, format_seconds),
             f(r.tokens_per_s, lambda v: f"{v:,.0f}"), f(r.mfu, format_percent),
             f(r.memory_reserved_bytes, format_bytes) + " / " + f(r.memory_capacity_bytes, format_bytes),
             f(r.energy_kwh, lambda v: f"{v:,.1f}"), f(r.cost_dollars, lambda v: f"${v:,.0f}"),
             r.bottleneck if isinstance(r.bottleneck, str) else "-", r.reason or "", r.source]
            for r in df.itertuples(index=False)]
    return "\n".join([
        "# One workload across hardware", "",
        f"{model} (bf16, AdamW), global batch {w['global_batch_size']} × {w['seq_len']} tokens, on **one "
        f"device** of each kind in the library, trained on {tokens:.0e} tokens: "
        "`st.compare(model, [...], cfg, tokens=...)`.",
        "Generated by `python -m simtrain.report.compare comparison > docs/hardware-comparison.md`;",
        "`tests/unit/test_docs_hardware.py` fails when it goes stale. Energy is device power only",
        "(StepReport.ENERGY_MODEL); cost uses each spec's indicative price per device-hour ('-' where none).",
        "A device that cannot run the workload says why instead of a number.", "",
        _md_table(["device", "kind", "status", "step", "tokens/s", "MFU", "memory (reserved / usable)",
                   "energy kWh", "cost", "bottleneck", "why not", "spec sources"], rows), ""])


if __name__ == "__main__":
    import sys
    pages = {"hardware": hardware_markdown, "comparison": comparison_markdown}
    if len(sys.argv) != 2 or sys.argv[1] not in pages:
        sys.exit("usage: python -m simtrain.report.compare hardware|comparison")
    print(pages[sys.argv[1]](), end="")
