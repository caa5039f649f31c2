"""``Model.from_torch``: the real operator graph of one training step of an nn.Module.

Pipeline: :func:`~simtrain.graph.capture.step.capture_step` runs forward, loss and backward under a
torch-function mode, an ATen dispatch mode and saved-tensor hooks; the ATen rules
(:mod:`simtrain.graph.aten`) price each operator; :mod:`simtrain.graph.capture.phase` splits the
backward into agrad / wgrad by data flow; :mod:`simtrain.graph.capture.build` folds the events of each
top-level torch call (``F.linear``, ``F.layer_norm``, ``x + y``, ...) into one
:class:`~simtrain.graph.op.Op` together with the backward work of the autograd nodes that call
created. Calls that do no work at all (pure views) make no op; they are counted in
``model.meta["zero_cost_calls"]``.

Names and blocks: a module path ``layers.3.attn.qkv`` becomes ``layers.3/attn/qkv`` (a numeric
index stays with its container); the op is ``layers.3/attn/qkv/linear`` (the leaf is the kind for
known torch functions, else the function's name; repeats get ``.1``, ``.2``). The block is the first
``block_depth`` segments (``layers.3``); ops of the root module's own forward join the block
before them (the first block when none is before), the loss joins the last block.

Per sample: the example batch B is dim 0 of the inputs; FLOPs, activation traffic and saved bytes
are the captured totals ÷ B, so the cost layer's ``× micro_batch`` scales them back (capturing at
batch 2 and 4 gives the same per-sample records, up to what does not scale with the batch, which
goes to the per-micro-batch weight / ``stats_bytes_per_batch`` fields). Weight traffic is per
micro-batch. Parameters are counted once (tied weights included) on the first op that reads them.

ATen operators without a rule are *unmodelled*: they add nothing, and ``model.unmodelled`` lists
each (name, count, phase, example input shapes) — the summary shows them on an UNMODELLED line.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import Any

from simtrain.glossary import DType, OpClass
from simtrain.graph.aten import CLASS_RANK, AtenCost, evaluate
from simtrain.graph.capture.build import OpCounts, fold_event, fold_saved
from simtrain.graph.capture.events import AtenEvent, CallRecord, TensorMeta
from simtrain.graph.capture.phase import BackwardPhases, classify_backward
from simtrain.graph.op import Gemm, ModelParts, Op, PhaseCounts, UnmodelledOp
from simtrain.graph.view import ModelView

__all__ = ["torch_parts", "graph_parts", "aten_flops", "KIND_OF_CALL"]

_DTYPES = {"float32": DType.FP32, "float16": DType.FP16, "bfloat16": DType.BF16, "float64": DType.FP64,
           "int64": DType.INT64, "int8": DType.INT8, "bool": DType.BOOL, "float8_e4m3fn": DType.FP8,
           "float8_e5m2": DType.FP8}

#: Op kind by the torch function that made it; otherwise the kind of its dominant ATen op.
KIND_OF_CALL = {
    "linear": "linear", "bilinear": "linear", "conv1d": "conv1d", "conv2d": "conv2d", "conv3d": "conv3d",
    "conv_transpose1d": "conv1d", "conv_transpose2d": "conv2d", "layer_norm": "layernorm",
    "rms_norm": "rmsnorm", "batch_norm": "batchnorm", "group_norm": "groupnorm",
    "scaled_dot_product_attention": "attention", "embedding": "embedding", "cross_entropy": "cross_entropy",
    "nll_loss": "cross_entropy", "mse_loss": "loss", "dropout": "dropout", "gelu": "gelu", "silu": "silu",
    "relu": "relu", "softmax": "softmax", "log_softmax": "softmax", "matmul": "matmul", "__matmul__": "matmul",
    "bmm": "bmm", "einsum": "matmul", "max_pool2d": "maxpool", "avg_pool2d": "avgpool",
    "adaptive_avg_pool2d": "avgpool", "__add__": "add", "__radd__": "add", "__iadd__": "add", "add": "add",
    "__mul__": "mul", "__rmul__": "mul", "mul": "mul",
}
_FP32_KINDS = frozenset({"softmax", "cross_entropy", "loss"})


def torch_parts(module, example_inputs, loss_fn=None, *, name: str | None = None, block_depth: int = 1,
               seq_len: int | None = None, fake: bool | None = None) -> ModelParts:
    """Capture one training step of ``module`` on ``example_inputs`` (dim 0 = batch) as model parts
    (``Model.from_torch`` wraps them).

    ``loss_fn(output) -> scalar`` (default: the sum of the floating outputs). ``fake`` None uses
    fake tensors (no memory, no arithmetic) when parameters or inputs are on the meta device.
    ``seq_len`` defaults to dim 1 of an integer (token id) first input.
    """
    from simtrain.errors import SpecError
    from simtrain.graph.capture.step import capture_step
    if not isinstance(block_depth, int) or block_depth < 1:
        raise SpecError.one(None, "block_depth", f"must be a positive integer, got {block_depth!r}")
    cap = capture_step(module, example_inputs, loss_fn, fake=fake)
    if seq_len is None:
        seq_len = _token_seq_len(example_inputs)
    return graph_parts(cap, name=name or type(module).__name__, block_depth=block_depth, seq_len=seq_len)


def _token_seq_len(example_inputs: Any) -> int | None:
    first = example_inputs
    while isinstance(first, (tuple, list)) and first:
        first = first[0]
    if isinstance(first, dict):
        first = next(iter(first.values()), None)
    dtype = str(getattr(first, "dtype", ""))
    return int(first.shape[1]) if "int" in dtype and getattr(first, "dim", lambda: 0)() == 2 else None


def aten_flops(model: ModelView, batch: int | None = None) -> dict[tuple[str, str], float]:
    """FLOPs by (ATen packet, phase) over the model, for comparison with FlopCounterMode: per
    sample when ``batch`` is None, else the whole step at that batch (per-sample work × batch plus
    the work that does not scale with the batch)."""
    out: dict[tuple[str, str], float] = defaultdict(float)
    for op in model.ops:
        for n, ph, f in op.attr("aten_flops", ()) or ():
            out[(n, ph)] += f * (batch or 1)
        if batch is not None:
            for n, ph, f in op.attr("aten_flops_per_batch", ()) or ():
                out[(n, ph)] += f
    return dict(out)


# --- naming and blocks ----------------------------------------------------------------------------

def _segments(path: str) -> list[str]:
    merged: list[str] = []
    for p in path.split(".") if path else []:
        if p.isdigit() and merged:
            merged[-1] += "." + p
        else:
            merged.append(p)
    return merged


def _blocks(paths: list[str], depth: int) -> list[str]:
    """Block of each op; root-level ops inherit (see module docstring); non-contiguous reuse of a
    block (a module called again later) gets an ``@k`` suffix so blocks stay contiguous."""
    segs = [_segments(p) if p != "loss" else [] for p in paths]
    prefixes = {"/".join(s[:k]) for s in segs for k in range(1, min(len(s), depth))}
    # A module's own ops (its path shorter than the depth, and it has deeper blocks) join the
    # block before them, like the root's; a shallow leaf module (an embedding) is its own block.
    raw = [("/".join(s[:depth]) if s and (len(s) >= depth or "/".join(s) not in prefixes) else None)
           for s in segs]
    nxt = next((b for b in raw if b), "model")
    out, prev = [], None
    for b in raw:
        prev = b or prev or nxt
        out.append(prev)
    seen: dict[str, int] = {}
    final, last_raw = [], None
    for b in out:
        if b != last_raw:
            seen[b] = seen.get(b, 0) + 1
            last_raw = b
        final.append(b if seen[b] == 1 else f"{b}@{seen[b]}")
    return final


def _unique(names: list[str]) -> list[str]:
    count: dict[str, int] = {}
    out = []
    for n in names:
        k = count.get(n, 0)
        count[n] = k + 1
        out.append(n if k == 0 else f"{n}.{k}")
    return out


# --- building -----------------------------------------------------------------------------------

def _per_sample(shape: tuple[int, ...], batch: int, m: TensorMeta) -> tuple[int, ...]:
    if not m.batch or not shape:
        return shape
    if shape[0] == batch:
        return shape[1:]
    return (shape[0] // batch, *shape[1:]) if shape[0] % batch == 0 else shape


def _gemm_per_sample(cost: AtenCost, batch: int) -> Gemm | None:
    g = cost.gemm
    if g is None:
        return None
    if cost.gemm_axis == "m" and g.m % batch == 0:
        return Gemm(g.m // batch, g.n, g.k, g.batch)
    if cost.gemm_axis == "n" and g.n % batch == 0:
        return Gemm(g.n // batch, g.m, g.k, g.batch)
    if cost.gemm_axis == "batch" and g.batch % batch == 0:
        return Gemm(g.m, g.n, g.k, g.batch // batch)
    return g


def _dominant(evs: list[tuple[AtenEvent, AtenCost]]) -> tuple[AtenEvent, AtenCost] | None:
    """The event that names the op: one that does work (FLOPs or bytes), forward first, then the
    highest op class (attention > conv > matmul > ...), then the most FLOPs."""
    busy = [x for x in evs if x[1].flops > 0 or x[1].io not in ("view", "none")] or evs
    pool = [x for x in busy if x[0].phase == "fw"] or busy
    return max(pool, key=lambda x: (CLASS_RANK[x[1].op_class], x[1].flops), default=None)


def _attention(call: CallRecord, dom: AtenCost | None):
    if dom is not None and dom.attention is not None:
        return dom.attention
    if call.func != "scaled_dot_product_attention" or len(call.in_metas) < 3:
        return None
    from simtrain.graph.op import AttentionInfo
    q, k = call.in_metas[0].shape, call.in_metas[1].shape
    if len(q) != 4:
        return None
    return AttentionInfo(q[1], k[1], q[3], q[2], k[2], bool(call.attrs.get("is_causal", False)), fused=False)


def _op_attrs(call: CallRecord, acc: OpCounts, evs) -> tuple[tuple[str, object], ...]:
    attrs: list[tuple[str, object]] = [("module", call.module), ("torch_call", call.func),
                                       ("aten", tuple(sorted({e.name for e, _ in evs if e.phase == "fw"})))]
    attrs.append(("aten_flops", tuple(sorted((n, ph, f) for (n, ph), f in acc.aten_flops.items()))))
    if acc.aten_flops_per_batch:
        attrs.append(("aten_flops_per_batch", tuple(sorted((n, ph, f) for (n, ph), f
                                                           in acc.aten_flops_per_batch.items()))))
        fpb = acc.flops_per_batch
        attrs.append(("flops_per_batch", PhaseCounts(fpb.get("fw", 0.0), fpb.get("agrad", 0.0),
                                                     fpb.get("wgrad", 0.0))))
    if acc.random_draws:
        attrs.append(("random_draws", acc.random_draws))
    if acc.stats_bytes:
        attrs.append(("stats_bytes", acc.stats_bytes))
    if acc.stats_bytes_per_batch:
        attrs.append(("stats_bytes_per_batch", acc.stats_bytes_per_batch))
    if acc.kernel_calls:
        k = acc.kernel_calls
        attrs.append(("aten_kernels", PhaseCounts(k.get("fw", 0.0), k.get("agrad", 0.0), k.get("wgrad", 0.0))))
    return tuple(attrs)


def _make_op(name: str, block: str, call: CallRecord, acc: OpCounts, evs, params: int, batch: int) -> Op:
    picked = _dominant(evs)
    dom_ev, dom = picked if picked else (None, None)
    kind = KIND_OF_CALL.get(call.func) or (dom.kind if dom else "memory")
    op_class = dom.op_class if dom else OpClass.MEMORY
    outs = [m for m in (dom_ev.outs if dom_ev else ()) if m is not None and m.floating]
    dtype = _DTYPES.get(outs[0].dtype, DType.FP32) if outs else DType.FP32
    return Op(name=name, kind=kind, op_class=op_class, block=block, **acc.fields(), param_count=params,
              shapes=tuple(_per_sample(m.shape, batch, m) for m in call.in_metas),
              out_shape=_per_sample(call.out_metas[0].shape, batch, call.out_metas[0]) if call.out_metas else (),
              dtype=dtype, gemm=_gemm_per_sample(dom, batch) if dom else None,
              attention=_attention(call, dom),
              runs_in_low_precision=not (op_class is OpClass.NORM or kind in _FP32_KINDS),
              attrs=_op_attrs(call, acc, evs))


def _group(cap, costs: dict[int, AtenCost | None], phases: BackwardPhases):
    """Events (with a rule) by call, and the unmodelled ones tallied by (ATen name, phase)."""
    by_call: dict[int | None, list[tuple[AtenEvent, AtenCost]]] = defaultdict(list)
    missing: dict[tuple[str, str], list] = {}
    for ev in cap.events:
        cost = costs[ev.index]
        if cost is None:
            phase = "fw" if ev.phase == "fw" else phases.event_phase.get(ev.index, "agrad")
            row = missing.setdefault((ev.full_name, phase), [0, tuple(m.shape for m in ev.inputs)])
            row[0] += 1
            continue
        by_call[ev.call].append((ev, cost))
    unmodelled = tuple(UnmodelledOp(n, c, ph, shapes) for (n, ph), (c, shapes) in sorted(missing.items()))
    return by_call, unmodelled


def _param_owners(cap, by_call) -> tuple[dict[int, int], list[str]]:
    """Each unique parameter's numel goes to the first call whose forward reads it."""
    owner: dict[int, int] = {}
    counts: dict[int, int] = defaultdict(int)
    for ev in cap.events:
        if ev.phase != "fw" or ev.call is None:
            continue
        for m in ev.inputs:
            if m.is_param and m.storage in cap.params and m.storage not in owner:
                owner[m.storage] = ev.call
                counts[ev.call] += cap.params[m.storage][1]
    unused = [n for k, (n, _, _) in cap.params.items() if k not in owner]
    unused_numel = sum(cap.params[k][1] for k in cap.params if k not in owner)
    return dict(counts), unused if unused_numel else []


def graph_parts(cap, *, name: str, block_depth: int = 1, seq_len: int | None = None) -> ModelParts:
    """Fold a :class:`~simtrain.graph.capture.capture.Capture` into model parts (see module docstring)."""
    costs = {ev.index: evaluate(ev) for ev in cap.events}
    phases = classify_backward(cap.events, cap.sinks, lambda ev: costs[ev.index] is not None and
                               costs[ev.index].op_class in (OpClass.MEMORY, OpClass.ELEMENTWISE))
    fixed = frozenset(ev.outs[j].vn for ev in cap.events if ev.phase == "fw" and costs[ev.index] is not None
                      for j in costs[ev.index].mb_stats if j < len(ev.outs) and ev.outs[j] is not None)
    phases = replace(phases, fixed=fixed)
    by_call, unmodelled = _group(cap, costs, phases)
    params, unused = _param_owners(cap, by_call)
    saved_by_call: dict[int | None, list] = defaultdict(list)
    for rec in cap.saved.values():
        saved_by_call[rec.call].append(rec)
    accs: dict[int, OpCounts] = {}
    for call in cap.calls:
        acc = OpCounts(cap.batch_size)
        _fold_into(acc, by_call.get(call.index, ()), saved_by_call.get(call.index, ()), cap, costs, phases)
        if acc.busy or params.get(call.index):
            accs[call.index] = acc
    zero_cost = sum(1 for c in cap.calls if c.index not in accs and c.index in by_call)
    kept = [c for c in cap.calls if c.index in accs]
    if not kept:
        from simtrain.errors import SpecError
        raise SpecError.one(None, "module", "the captured step did no modelled work")
    _fold_into(accs[kept[-1].index], by_call.get(None, ()), saved_by_call.get(None, ()), cap, costs, phases)
    if unused:  # parameters the step never read: still parameters of the model
        params[kept[0].index] = params.get(kept[0].index, 0) + sum(
            n for k, (nm, n, _) in cap.params.items() if nm in unused)
    blocks = _blocks([c.module for c in kept], block_depth)
    leaves = [KIND_OF_CALL.get(c.func) or c.func.strip("_") or "op" for c in kept]
    base = ["/".join(_segments(c.module)) for c in kept]
    names = _unique([f"{b}/{k}" if b else k for b, k in zip(base, leaves, strict=True)])
    ops = [_make_op(n, b, c, accs[c.index], by_call.get(c.index, []), params.get(c.index, 0), cap.batch_size)
           for n, b, c in zip(names, blocks, kept, strict=True)]
    op_of_call = {c.index: n for c, n in zip(kept, names, strict=True)}
    meta = {"source": "torch", "capture_batch_size": cap.batch_size, "capture": "fake" if cap.fake else "real",
            "block_depth": block_depth, "zero_cost_calls": zero_cost, "aten_events": len(cap.events),
            "unused_params": unused}
    return ModelParts(name, tuple(ops), edges=tuple(_edges(cap, op_of_call, names)), seq_len=seq_len,
                      unmodelled=unmodelled, meta=meta)


def _fold_into(acc: OpCounts, evs, saved, cap, costs, phases) -> None:
    """Fold events and saved storages into ``acc`` (also the work no call claims — rare
    engine-side backward ops — which joins the last op)."""
    for ev, cost in evs:
        fold_event(acc, ev, cost, phases)
    for rec in saved:
        prod_ev = cap.events[rec.producer[0]] if rec.producer else None
        fold_saved(acc, rec, (prod_ev, costs[prod_ev.index]) if prod_ev else None)


def _edges(cap, op_of_call: dict[int, str], names: list[str]) -> list[tuple[str, str]]:
    """Forward data flow between ops; calls without an op (views) pass their sources through."""
    src: dict[int, frozenset[str]] = {}
    edges: set[tuple[str, str]] = set()
    for ev in cap.events:
        if ev.phase != "fw":
            continue
        sources = frozenset().union(*(src.get(m.vn, frozenset()) for m in ev.inputs))
        op = op_of_call.get(ev.call) if ev.call is not None else None
        if op is not None:
            edges.update((s, op) for s in sources if s != op)
            produced = frozenset((op,))
        else:
            produced = sources
        for m in ev.outs:
            if m is not None:
                src[m.vn] = produced
    order = {n: i for i, n in enumerate(names)}
    return sorted(edges, key=lambda e: (order[e[0]], order[e[1]]))
