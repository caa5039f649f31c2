"""``simtrain model list`` and ``simtrain model show NAME [--seq-len N] [--ops]``.

``NAME`` is a library model (workloads/models), a model YAML, or a Hugging Face ``config.json``.
Counts are per sample (one sequence, image or row) and per token for sequence models; FLOPs count
one FMA as 2 and the full attention square (PaLM / Megatron convention); bytes are at 16-bit
activations.
"""

from __future__ import annotations

from simtrain.graph.library import load_model, load_model_spec, model_names
from simtrain.graph.model import Model
from simtrain.graph.summary import (
    active_param_count,
    model_flops,
    palm_flops_per_token,
    saved_bytes,
    summary_frame,
)
from simtrain.report.format import format_bytes, format_count, format_flops, render_table

__all__ = ["register", "run_show", "run_list", "show_text", "list_text"]


def register(sub) -> None:
    p = sub.add_parser("model", help="inspect the model library: parameters, FLOPs, activation bytes")
    msub = p.add_subparsers(dest="model_command", metavar="ACTION")
    show = msub.add_parser("show", help="one model: params, FLOPs per sample / token by phase, bytes, blocks")
    show.add_argument("name", help="library name, model YAML, or Hugging Face config.json")
    show.add_argument("--seq-len", type=int, default=None, help="rebuild a sequence model at this length")
    show.add_argument("--ops", action="store_true", help="print the per-op table too")
    show.set_defaults(func=run_show)
    lst = msub.add_parser("list", help="every model of workloads/models")
    lst.set_defaults(func=run_list)
    p.set_defaults(func=lambda args: (p.print_help(), 0)[1])


def _load(name: str, seq_len: int | None) -> Model:
    if name.endswith(".json"):
        return Model.from_hf_config(name, seq_len=seq_len)
    return load_model(name, seq_len=seq_len)


def _phase_line(label: str, counts, scale: float) -> list[str]:
    return [label, format_flops(counts.fw / scale), format_flops(counts.agrad / scale),
            format_flops(counts.wgrad / scale), format_flops(counts.total / scale)]


def _blocks_text(model: Model) -> str:
    b = model.blocks
    listed = ", ".join(b) if len(b) <= 6 else f"{', '.join(b[:3])}, …, {', '.join(b[-2:])}"
    return f"{len(b)}: {listed}"


def show_text(model: Model, ops: bool = False) -> str:
    """The ``model show`` report as text."""
    n, active = model.param_count, active_param_count(model)
    arch = model.arch
    lines = [f"{model.name}" + (f"  ({arch.family}; {arch.source})" if arch is not None and arch.source else "")]
    params = format_count(n) + (f"  (active per token {format_count(active)})" if active != n else "")
    if arch is not None and arch.published_params:
        params += f"  published {arch.published_params / 1e9:.4g} B, ratio {n / arch.published_params:.4f}"
    lines += [f"parameters        {params}", f"blocks            {_blocks_text(model)}",
              f"tokens/sample     {model.seq_len or model.meta.get('tokens') or 1}", ""]
    flops = model_flops(model)
    rows = [_phase_line("per sample", flops, 1.0)]
    tokens = model.seq_len
    if tokens:
        rows.append(_phase_line("per token", flops, tokens))
        rows.append(_phase_line("per token, matmul", model_flops(model, matmul_only=True), tokens))
    lines.append(render_table(["FLOPs (FMA = 2)", "forward", "agrad", "wgrad", "total"], rows, right=(1, 2, 3, 4)))
    palm = palm_flops_per_token(model)
    if palm and tokens:
        ratio = model_flops(model, matmul_only=True).total / tokens / palm
        lines.append(f"PaLM 6N + 12·L·H·Q·T = {format_flops(palm)} per token; matmul count / PaLM = {ratio:.4f}")
    written = sum(op.act_write.fw * 2 + op.fixed_write_bytes.fw for op in model.ops)
    lines += ["", f"activations written, forward (16-bit)  {format_bytes(written)} per sample",
              f"saved for backward (16-bit)            {format_bytes(saved_bytes(model))} per sample "
              f"({format_bytes(saved_bytes(model, norm_stats=False))} without norm fp32 statistics)"]
    if model.unmodelled:
        lines.append(f"UNMODELLED: {', '.join(f'{u.name}×{u.count}' for u in model.unmodelled)}")
    if ops:
        lines += ["", _ops_table(model)]
    return "\n".join(lines)


def _ops_table(model: Model) -> str:
    df = summary_frame(model)
    headers = ["name", "kind", "in_shapes", "params", "fw", "agrad", "wgrad", "act fw", "saved"]
    rows = []
    for r in df.itertuples(index=False):
        if r.name == "UNMODELLED":
            rows.append([r.name, r.kind, "", "", "", "", "", "", ""])
            continue
        rows.append([r.name, r.kind, r.in_shapes, format_count(r.params), format_flops(r.fw_flops),
                     format_flops(r.agrad_flops), format_flops(r.wgrad_flops),
                     format_bytes(r.act_write_fw_bytes), format_bytes(r.saved_bytes)])
    return render_table(headers, rows, right=(3, 4, 5, 6, 7, 8))


def list_text() -> str:
    """The ``model list`` table."""
    rows = []
    for name in model_names():
        spec = load_model_spec(name)
        m = load_model(name)
        rows.append([name, spec.family, format_count(m.param_count), m.seq_len or "", spec.description])
    return render_table(["name", "family", "params", "seq_len", "description"], rows, right=(2, 3))


def run_show(args) -> int:
    print(show_text(_load(args.name, args.seq_len), ops=args.ops))
    return 0


def run_list(args) -> int:
    print(list_text())
    return 0
