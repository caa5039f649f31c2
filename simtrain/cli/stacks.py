"""``simtrain stacks`` (every software-stack preset and its knobs) and ``simtrain stacks show NAME``."""

from __future__ import annotations

from simtrain.report.format import render_table

__all__ = ["register", "stacks_table", "show_stack", "stacks_markdown"]

_COLUMNS = ("attention_kernel", "elementwise_bytes_fraction", "host_dispatch_s", "tp_comm_overlap",
            "zero_stage", "dp_overlap", "allocator_reserve_fraction", "workspace_bytes")


def register(subparsers) -> None:
    p = subparsers.add_parser("stacks", help="software-stack presets (TrainConfig.stack) and their knobs")
    sub = p.add_subparsers(dest="stacks_command", metavar="ACTION")
    sub.add_parser("list", help="a table of every preset").set_defaults(func=_run_list)
    sp = sub.add_parser("show", help="one preset: every knob, its value and its documentation")
    sp.add_argument("name")
    sp.set_defaults(func=_run_show)
    p.set_defaults(func=_run_list)


def stacks_table() -> str:
    from simtrain.specs.stack import load_stack, stack_names
    rows = []
    for name in stack_names():
        s = load_stack(name)
        rows.append([name] + [_cell(c, getattr(s, c)) for c in _COLUMNS])
    return render_table(["stack", *_COLUMNS], rows)


def _cell(column: str, value) -> str:
    from simtrain.report.format import format_bytes, format_seconds
    if value is None:
        return "(config)"
    if column == "workspace_bytes":
        return format_bytes(value)
    if column == "host_dispatch_s":
        return format_seconds(value)
    return str(value)


def show_stack(name: str) -> str:
    from simtrain.specs.stack import Stack, load_stack
    s = load_stack(name)
    lines = [f"{s.name}: {s.description}", f"source: {s.source}", ""]
    for field, info in Stack.model_fields.items():
        if field in ("name", "description", "source"):
            continue
        doc = " ".join((info.description or "").split())
        lines.append(f"  {field:<28} {getattr(s, field)!s:<12} {doc}")
    return "\n".join(lines)


def _run_list(args) -> int:
    print(stacks_table())
    return 0


def _run_show(args) -> int:
    print(show_stack(args.name))
    return 0


_INTRO = """# Software stacks

A device profile (`hardware_specs/devices/*.yaml`, `efficiency:`) says what the hardware reaches on
isolated kernels, from component measurements. A *stack* says how much of that a training framework
realises: which attention kernel runs, which elementwise chains are fused, what the CPU costs per
kernel, which collectives are hidden behind what, how memory is allocated. Name one with
`TrainConfig(stack="fsdp2")`, override knobs with `stack={"preset": "fsdp2", "host_dispatch_s": 1e-5}`
or `st.load_stack("fsdp2").with_overrides(...)`. Your own framework on a preset's kernels:
`stack={"preset": "megatron-core", "realisation": "prior"}` keeps the kernels and takes the cross-stack
prior's idle and host gaps instead of those fitted on the preset's framework (docs/fit-pool.md);
`zero_stage`, `dp_overlap`, `fused_optimizer` and
`flash_attention` are defaults that an explicit TrainConfig field overrides. `simtrain stacks` lists
them. The knob values below that are marked U in their source are not measured here: learn them
for your own stack from one measured run with `st.calibrate_runs` (docs/calibration.md).

This page is generated from `simtrain/specs/stacks/*.yaml` (`python -m simtrain.cli.stacks`); a test
keeps it in sync.
"""


def stacks_markdown() -> str:
    """docs/stacks.md: every preset, every knob with its value, and the knob documentation."""
    from simtrain.specs.stack import Stack, load_stack, stack_names
    out = [_INTRO, "## Knobs", "", "| knob | meaning |", "|---|---|"]
    for field, info in Stack.model_fields.items():
        if field not in ("name", "description", "source"):
            out.append(f"| `{field}` | {' '.join((info.description or '').split())} |")
    out += ["", "## Presets", ""]
    knobs = [f for f in Stack.model_fields if f not in ("name", "description", "source")]
    for name in stack_names():
        st = load_stack(name)
        out += [f"### {name}", "", " ".join(st.description.split()), "", f"Source: {' '.join(st.source.split())}", "",
                "| knob | value |", "|---|---|"]
        out += [f"| `{k}` | {_cell(k, getattr(st, k))} |" for k in knobs]
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    print(stacks_markdown())
