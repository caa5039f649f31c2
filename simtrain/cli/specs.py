"""``simtrain specs list`` (the whole hardware library as tables) and ``simtrain specs show NAME``
(one item, every field with its source and mark). Thin: loading is ``simtrain.specs.library``,
number formatting is ``simtrain.report.format``."""

from __future__ import annotations

import argparse
from collections import Counter

from simtrain.errors import SpecError
from simtrain.glossary import DType, Mark
from simtrain.report.format import (
    MISSING,
    format_bytes,
    format_flops_per_s,
    format_percent,
    format_quantity,
    format_rate,
    format_seconds,
    render_table,
)
from simtrain.specs.base import Sourced, Spec, iter_sourced
from simtrain.specs.library import library_names, library_path, read_spec_document, validate_document

__all__ = ["register", "print_library", "library_tables", "mark_counts", "show_text", "headline_peak"]

LIBRARY_KINDS = ("device", "link", "node", "cluster")
_SHOW_KINDS = LIBRARY_KINDS + ("efficiency",)
#: the "peak" column: bf16, else the best other 16-bit path, else fp32, else whatever there is
_PEAK_ORDER = (DType.BF16, DType.FP16, DType.FP32, DType.FP8, DType.INT8, DType.TF32, DType.FP64)


def register(subparsers) -> None:
    p = subparsers.add_parser("specs", help="the hardware library: list it, or show one item",
                              description="The hardware library in hardware_specs/.")
    sub = p.add_subparsers(dest="specs_command", metavar="ACTION")
    lp = sub.add_parser("list", help="a table of every device, link, node and cluster")
    lp.add_argument("--kind", choices=LIBRARY_KINDS, help="only this kind of item")
    lp.set_defaults(func=_run_list)
    sp = sub.add_parser("show", help="one item with every number, its source and its mark")
    sp.add_argument("name", help="a library name (device, link, node, cluster or efficiency profile) or a path")
    sp.add_argument("--kind", choices=_SHOW_KINDS, help="look only in this folder")
    sp.set_defaults(func=_run_show)
    p.set_defaults(func=_run_list, kind=None)


def _run_list(args: argparse.Namespace) -> int:
    kinds = (args.kind,) if getattr(args, "kind", None) else LIBRARY_KINDS
    print(library_tables(kinds))
    return 0


def print_library() -> int:
    """Print the whole library (used by ``simtrain`` with no arguments until estimates exist)."""
    print(library_tables(LIBRARY_KINDS))
    return 0


# ----------------------------------------------------------------------------------------------
# list
# ----------------------------------------------------------------------------------------------
def _load(kind: str, name: str):
    from simtrain.specs import library
    return getattr(library, f"load_{kind}")(name)


def headline_peak(device) -> tuple[DType, float]:
    """The dtype and dense peak shown in the library table (bf16, else best 16-bit, else fp32...)."""
    for dtype in _PEAK_ORDER:
        value = device.peak(dtype)
        if value is not None:
            return dtype, value
    dtype, sourced = next(iter(device.peak_flops_per_s.items()))
    return dtype, sourced.value


def _device_row(d) -> list[str]:
    dtype, peak = headline_peak(d)
    peak_text = format_flops_per_s(peak).replace("FLOP/s", "OP/s") if dtype is DType.INT8 else format_flops_per_s(peak)
    usable = d.usable_memory_bytes
    memory = format_bytes(d.memory_capacity_bytes)
    if usable < d.memory_capacity_bytes:
        memory += f" ({format_bytes(usable)} usable)"
    return [d.name, d.kind.value, peak_text, dtype.value, memory, format_rate(d.memory_bandwidth_bytes_per_s)]


def _link_row(x) -> list[str]:
    return [x.name, x.kind.value, format_rate(x.per_direction_bytes_per_s), format_seconds(x.latency)]


def _node_row(n) -> list[str]:
    fabric = n.fabric.topology if n.fabric.link is None else \
        f"{n.fabric.topology} ({n.fabric.links_per_device} x {n.fabric.link.name})"
    per_device = format_rate(n.fabric.per_device_bytes_per_s) if n.fabric.link else MISSING
    return [n.name, f"{n.devices_count} x {n.device.name}", fabric, per_device]


def _cluster_row(c) -> list[str]:
    net = c.network
    topology = net.topology if not net.torus_dims else f"{net.topology} {'x'.join(map(str, net.torus_dims))}"
    per_node = format_rate(net.per_node_bytes_per_s) if net.nic_link else MISSING
    nics = f"{net.nics_per_node} x {net.nic_link.name}" if net.nic_link else MISSING
    return [c.name, f"{c.nodes_count} x {c.node.name}", f"{c.devices_count:,}", topology, nics, per_node]


_TABLES = {
    "device": ("Devices (dense peaks)", ["NAME", "KIND", "PEAK", "DTYPE", "MEMORY", "MEMORY BW"], [2, 5], _device_row),
    "link": ("Links (bandwidth per direction)", ["NAME", "KIND", "BANDWIDTH", "LATENCY"], [2, 3], _link_row),
    "node": ("Nodes (fabric bandwidth per device, per direction)", ["NAME", "DEVICES", "FABRIC", "PER DEVICE"],
             [3], _node_row),
    "cluster": ("Clusters (network injection per node, per direction)",
                ["NAME", "NODES", "DEVICES", "NETWORK", "NICS", "PER NODE"], [2, 5], _cluster_row),
}


def library_tables(kinds=LIBRARY_KINDS) -> str:
    """The library as text tables, one per kind, then a count of items and of numbers by mark."""
    blocks, counts, items = [], Counter(), Counter()
    for kind in kinds:
        title, headers, right, row_of = _TABLES[kind]
        rows = []
        for name in library_names(kind):
            spec = _load(kind, name)
            rows.append(row_of(spec))
            counts.update(mark_counts(spec))
            items[kind] += 1
        blocks.append(f"{title}\n{render_table(headers, rows, right=right)}")
    listed = ", ".join(f"{items[k]} {k}s" for k in kinds)
    marks = ", ".join(f"{m.value} {counts[m]}" for m in Mark)
    blocks.append(f"{sum(items.values())} items ({listed}); {sum(counts.values())} numbers by mark: {marks} "
                  f"(V primary, V2 secondary, D derived, U unverified)")
    return "\n\n".join(blocks)


def mark_counts(spec: Spec) -> Counter:
    """How many numbers of each mark ``spec`` states itself (referenced library items not counted)."""
    return Counter(s.mark for _, s in iter_sourced(spec, into_refs=False))


# ----------------------------------------------------------------------------------------------
# show
# ----------------------------------------------------------------------------------------------
def _run_show(args: argparse.Namespace) -> int:
    print(show_text(args.name, args.kind))
    return 0


def _find(name: str, kind: str | None) -> list[tuple[str, str]]:
    """(kind, path) of every library item called ``name`` (a node and a cluster may share a name)."""
    kinds = (kind,) if kind else _SHOW_KINDS
    if name.endswith((".yaml", ".yml")) or "/" in name:
        found_kind, _ = read_spec_document(library_path("device", name))
        return [(found_kind, name)]
    return [(k, str(library_path(k, name))) for k in kinds if name in library_names(k)]


def show_text(name: str, kind: str | None = None) -> str:
    """Every field of the item(s) called ``name``, with sources, marks and derived values."""
    matches = _find(name, kind)
    if not matches:
        where = kind or ", ".join(_SHOW_KINDS)
        raise SpecError.one(None, "name", f"no library item named {name!r} (looked in: {where}); "
                            f"`simtrain specs list` shows them all")
    blocks = []
    for found_kind, path in matches:
        _, body = read_spec_document(library_path(found_kind, path), expected=found_kind)
        spec = validate_document(found_kind, body, path)
        lines = [f"{found_kind} {getattr(spec, 'name', name)}  ({path})"]
        lines += _field_lines(spec, "  ")
        derived = _derived_lines(spec)
        if derived:
            lines += ["  derived:"] + [f"    {d}" for d in derived]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _sourced_text(s: Sourced, unit_name: str) -> str:
    value = format_quantity(s.value, unit_name) if isinstance(s.value, (int, float)) else str(s.value)
    note = f"; {s.note}" if s.note else ""
    return f"{value}  [{s.mark.value}] {s.source}{note}"


def _field_lines(spec: Spec, indent: str) -> list[str]:
    lines = []
    for key in type(spec).model_fields:
        lines += _value_lines(key, getattr(spec, key), indent, key)
    return lines


def _value_lines(label: str, value, indent: str, unit_name: str) -> list[str]:
    if value is None or value == {} or value == [] or value == "":
        return []
    if isinstance(value, Sourced):
        return [f"{indent}{label}: {_sourced_text(value, unit_name)}"]
    if isinstance(value, Spec) and value.library_kind in LIBRARY_KINDS:
        return [f"{indent}{label}: {value.name}  (a {value.library_kind}: simtrain specs show {value.name})"]
    if isinstance(value, Spec):
        return [f"{indent}{label}:"] + _field_lines(value, indent + "  ")
    if isinstance(value, dict):
        out = [f"{indent}{label}:"]
        for k, v in value.items():
            sub_unit = "_ops_per_s" if str(k) == DType.INT8.value and unit_name.endswith("_flops_per_s") else unit_name
            out += _value_lines(str(k), v, indent + "  ", sub_unit)
        return out
    if isinstance(value, list) and value and isinstance(value[0], Spec):
        out = [f"{indent}{label}:"]
        for i, item in enumerate(value):
            out += [f"{indent}  [{i}]"] + _field_lines(item, indent + "    ")
        return out
    if isinstance(value, (list, tuple)):
        return [f"{indent}{label}: {list(value)}"]
    if isinstance(value, float) and not isinstance(value, bool):
        return [f"{indent}{label}: {format_quantity(value, unit_name)}"]
    return [f"{indent}{label}: {value}"]


def _derived_lines(spec: Spec) -> list[str]:
    """Values computed from the file by named formulas, shown so a reader can check them."""
    kind = spec.library_kind
    if kind == "device":
        return _device_derived(spec)
    if kind == "link":
        return [f"per direction: {format_rate(spec.per_direction_bytes_per_s)}"]
    if kind == "node":
        return [f"fabric per device, per direction: {format_rate(spec.fabric.per_device_bytes_per_s)} "
                f"({spec.fabric.links_per_device} links x {format_rate(spec.fabric.link.per_direction_bytes_per_s)})"
                if spec.fabric.link else "fabric: none (one device)"]
    if kind == "cluster":
        return [f"devices: {spec.devices_count:,} ({spec.nodes_count} nodes x {spec.node.devices_count})",
                f"network injection per node, per direction: {format_rate(spec.network.per_node_bytes_per_s)}"]
    return []


def _device_derived(d) -> list[str]:
    out = [f"main memory: {d.main_tier.name}, {format_bytes(d.usable_memory_bytes)} usable, "
           f"{format_rate(d.memory_bandwidth_bytes_per_s)}"]
    unit = d.matrix_unit
    if unit is None:
        return out
    for dtype in unit.fma_per_clock_per_unit:
        derived = unit.derived_peak_flops_per_s(dtype)
        sheet = d.peak(dtype)
        ratio = f" = {format_percent(derived / sheet, 2)} of the datasheet peak" if sheet else ""
        out.append(f"{dtype.value} peak = {unit.units_count.value:,} units x {unit.fma_per_clock_per_unit[dtype]:g} "
                   f"FMA/clk x 2 x {format_quantity(unit.clock_hz.value, 'clock_hz')} = "
                   f"{format_flops_per_s(derived)}{ratio}")
    return out
