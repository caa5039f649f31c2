"""Where a step-time error comes from: simtrain's predicted seconds per op class versus the seconds
``torch.profiler`` attributes to the ATen operators of that class in a real step.

Predicted: :func:`simtrain.cost.op_cost.op_cost` of every op of the captured model at the step's batch
(forward + backward), summed by the op's class; the optimizer step from the report's breakdown.
Measured: the profiler's *self* CPU time of each ATen operator over ``steps`` profiled training steps
(after warm-up), mapped to a class by operator name (:func:`class_of_aten`), ÷ steps; operators run
inside ``Optimizer.step`` count as ``optimizer``. What the profiler cannot attribute to an operator
(Python, autograd bookkeeping) is the step's wall time less the sum: reported as ``unattributed``.
The profiler adds a few µs per operator, so classes made of many tiny operators read high.
"""

from __future__ import annotations

import re
from collections import defaultdict

__all__ = ["class_of_aten", "predicted_by_class", "measured_by_class", "class_table", "class_markdown", "CLASSES"]

_RULES = (
    ("attention", r"scaled_dot_product|flash_attention|_efficient_attention"),
    ("conv", r"convolution|conv\d|mkldnn_conv|_slow_conv|thnn_conv"),
    ("matmul", r"^(mm|addmm|bmm|baddbmm|matmul|linear|addmv|mv|dot|_mkldnn_matmul)$"),
    ("norm", r"layer_norm|batch_norm|group_norm|rms_norm|_batch_norm"),
    # pooling is a reduction over a window, as the graph's rules class it (graph/rules/conv.py _pool_fields)
    ("reduction", r"softmax|nll_loss|cross_entropy|^sum$|^mean$|logsumexp|^amax$|^max$|topk|sort|pool"),
    ("embedding", r"embedding|index_select|index_add|gather|scatter"),
    ("memory", r"^(copy_|clone|cat|stack|contiguous|_to_copy|fill_|zero_|zeros|zeros_like|empty.*|"
               r"new_empty.*|index|nonzero|resize_)$"),
)


def class_of_aten(name: str) -> str:
    """``aten::addmm`` → ``matmul``; anything not matched is ``elementwise``."""
    short = name.split("::")[-1]
    for cls, pattern in _RULES:
        if re.search(pattern, short):
            return cls
    return "elementwise"


def predicted_by_class(model, device_spec, batch: int, report) -> dict[str, float]:
    from simtrain.cost.compute import device_efficiency
    from simtrain.cost.op_cost import op_cost
    from simtrain.cost.precision import regime
    from simtrain.parallel.program import Layout, saved_set_bytes
    eff, reg = device_efficiency(device_spec), regime("fp32")
    lay = Layout(dp=1, tp=1, pp=1, cp=1, ep=1, v=1, micro_batches=1, micro_batch=batch)
    working = saved_set_bytes(model, batch, reg, lay, False) if eff.cache_bytes > 0 else 0.0
    out: dict[str, float] = defaultdict(float)
    for op in model.ops:
        c = op_cost(op, batch, reg, device_spec, eff, backward_working_set_bytes=working)
        out[op.op_class.value] += c.fw_s + c.bw_s
    out["optimizer"] += report.time_breakdown_s.get("optimizer", 0.0)
    return dict(out)


def _is_aten(evt) -> bool:
    return evt.name.startswith("aten::")


def measured_by_class(step, steps: int = 3, warmup: int = 2) -> tuple[dict[str, float], float]:
    """(self seconds per class per step, wall seconds per step) of ``step`` under the profiler."""
    import time

    from torch.profiler import ProfilerActivity, profile
    for _ in range(warmup):
        step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        wall = (time.perf_counter() - t0) / steps
    events = prof.events()
    opt_windows = [(e.time_range.start, e.time_range.end) for e in events if e.name.startswith("Optimizer.step")]
    out: dict[str, float] = defaultdict(float)
    for e in events:
        if not _is_aten(e):
            continue
        start = e.time_range.start
        in_opt = any(a <= start <= b for a, b in opt_windows)
        out["optimizer" if in_opt else class_of_aten(e.name)] += e.self_cpu_time_total * 1e-6 / steps
    return dict(out), wall


def class_table(predicted: dict[str, float], measured: dict[str, float], wall_s: float) -> list[dict]:
    """Rows (class, predicted_s, measured_s, error_pct), biggest measured first, plus unattributed."""
    rows = []
    for cls in sorted(set(predicted) | set(measured), key=lambda c: -measured.get(c, 0.0)):
        p, m = predicted.get(cls, 0.0), measured.get(cls, 0.0)
        rows.append({"class": cls, "predicted_s": p, "measured_s": m,
                     "error_pct": 100.0 * (p - m) / m if m > 0 else None})
    rows.append({"class": "unattributed", "predicted_s": 0.0, "measured_s": max(0.0, wall_s - sum(measured.values())),
                 "error_pct": None})
    return rows


CLASSES = ("matmul", "conv", "attention", "elementwise", "norm", "reduction", "embedding", "memory", "optimizer",
           "unattributed")


def class_markdown(tables: dict[str, list[dict]]) -> list[str]:
    """Markdown: one row per case, ``predicted / measured`` ms per class; a last row sums every case
    per class with its error."""
    head = "| case | " + " | ".join(CLASSES) + " |"
    lines = ["Milliseconds per step, predicted / measured (torch.profiler self time; see validation/diagnose.py).",
             "", head, "|---|" + "---:|" * len(CLASSES)]
    total_p: dict[str, float] = defaultdict(float)
    total_m: dict[str, float] = defaultdict(float)
    for case, rows in tables.items():
        by = {r["class"]: r for r in rows}
        cells = []
        for c in CLASSES:
            r = by.get(c)
            if r is None:
                cells.append("")
                continue
            total_p[c] += r["predicted_s"]
            total_m[c] += r["measured_s"]
            cells.append(f"{r['predicted_s'] * 1e3:.2f} / {r['measured_s'] * 1e3:.2f}")
        lines.append(f"| {case} | " + " | ".join(cells) + " |")
    err = [f"{100 * (total_p[c] - total_m[c]) / total_m[c]:+.0f} %" if total_m[c] > 0 else "" for c in CLASSES]
    lines.append("| **all cases: error** | " + " | ".join(err) + " |")
    share = sum(total_m.values()) or 1.0
    lines.append("| **all cases: share of measured** | "
                 + " | ".join(f"{100 * total_m[c] / share:.0f} %" for c in CLASSES) + " |")
    return lines
