"""The vectorized estimate: many configurations at once, with the estimate's own cost rules.

``estimate_grid(model, cluster, cfg, grid)`` / ``estimate_points(model, cluster, cfg, points)`` give
one row per configuration with the numbers ``st.estimate`` gives (step time, MFU / HFU, allocated and
reserved peak memory, feasibility, the last rank's compute / recompute / optimizer / bubble seconds);
the test suite holds them equal to ``st.estimate`` to 1e-9 on random points.

How: the axes split into *layout* axes (nodes, tp, pp, dp, cp, ep, micro-batch, virtual stages,
schedule, SP, global batch), validated once per distinct layout with the scalar checks
(``TrainConfig``, ``layout_problems``), and *settings* axes (recompute, ZeRO stage, stack, precision,
optimizer, overlap and fusion switches), resolved once per distinct combination as ``estimate``
resolves them (stack defaults, attention kernel, precision support). Valid points are grouped by
pipeline structure and costed by search/vector_core.py. Settings the factoring does not cover
(weight-streaming devices, emulated precisions, a data pipeline that can stall, frozen layers,
partial recomputation, a device profile with measured rank jitter) and grid keys outside the two
lists fall back to ``st.estimate`` per point — exact, only slower.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from simtrain.errors import SimtrainError, SpecError
from simtrain.parallel.schedule import SPLIT_BACKWARD
from simtrain.search.vector_core import MEMORY_TERMS
from simtrain.search.vector_layouts import layout_of, layout_of_point

__all__ = ["estimate_grid", "estimate_points", "estimate_codes", "LAYOUT_AXES", "SETTING_AXES"]

LAYOUT_AXES = ("nodes", "tp", "pp", "dp", "cp", "ep", "micro_batch_size", "virtual_stages", "pipeline_schedule",
               "sequence_parallel", "global_batch_size")
SETTING_AXES = ("recompute", "zero_stage", "stack", "precision", "optimizer", "dp_overlap", "fused_optimizer",
                "optimizer_impl", "grad_clipping")
_SIG_RADIX = 1 << 24  # more distinct setting signatures than any grid has

#: how ``_run(..., scalar=False)`` left each point: its layout or its settings rejected before costing, not
#: covered by the factoring (the caller's to cost), or costed here
PATHS = ("layout", "setting", "scalar", "vector")
OOM_REASON = "out of memory: the peak rank's reserved memory exceeds the device's usable memory"


@dataclasses.dataclass(frozen=True)
class _Setting:
    """One distinct combination of the settings axes, resolved as ``estimate`` resolves it."""

    cfg: object
    model: object
    reg: object
    variant: int
    sig_c: int
    sig_l: int
    sig_d: int
    sig_a: int
    prefetch: int
    slow: float
    host_dispatch_s: float
    waits: bool
    zero: int
    dp_overlap: bool
    overhead: float
    reserve: float
    workspace: float
    flops_per_sample: float
    peak_flops_per_s: float
    idle: float = 0.0
    """The stack's idle share (``Stack.idle_gap_fraction``): every rank's span stretched by it."""
    eff: object = None
    """The device's resolved efficiency profile (resolve.py)."""
    every_mb: bool = False
    """The stack reduces gradients in every micro-batch's backward at this ZeRO stage
    (``Stack.syncs_every_micro_batch``)."""
    slow_host_fraction: float = 0.0
    """The stack's slow hosts (``Stack.slow_host_fraction``, ``slow_host_step_loss``): each point's span
    stretched by their expected share over its hosts (cost/realisation.py ``slow_host_share``)."""
    slow_host_step_loss: float = 0.0
    knobs = ("prefetch", "slow", "host_dispatch_s", "waits", "zero", "dp_overlap", "overhead", "reserve",
             "workspace", "flops_per_sample", "peak_flops_per_s", "idle", "every_mb", "slow_host_fraction",
             "slow_host_step_loss")


def _code(table: dict, value) -> int:
    return table.setdefault(value, len(table))


def _vectorizable(r) -> bool:
    """Settings the factoring covers exactly (anything else: the scalar estimate per point); ``r`` the
    point's resolved inputs (resolve.py)."""
    cfg, cluster = r.cfg, r.cluster
    d = cfg.data
    data_free = d.sample_bytes is None and d.device_bytes_per_sample is None and d.transform_seconds_per_sample == 0
    return (data_free and not cfg.frozen_prefixes and cfg.recompute_num_layers is None
            and str(cfg.recompute) != "selective-op"
            and cfg.recompute_every_k_blocks is None and cluster.device.memory_external is None
            and cfg.first_stage_layers is None and cfg.last_stage_layers is None and cfg.reshard_after_forward
            and r.efficiency.rank_jitter_sigma == 0.0 and _step_scaled(cfg))


def _step_scaled(cfg) -> bool:
    """The stack's realisation is shares of the span at most, idle gaps and slow hosts
    (cost/realisation.py ``step_scaled``): the factoring stretches each rank's span by them
    (vector_core.evaluate_group); host gaps and the ranks' variation it has no term for."""
    from simtrain.cost.realisation import step_scaled
    return step_scaled(cfg.stack)


def _setting(model, cluster, fields: dict, tables: dict):
    """(_Setting, None) or (None, reason) or ("scalar", None) for one settings combination."""
    from simtrain.cost.compute import matrix_peak_flops_per_s
    from simtrain.estimator import _model_flops_per_sample
    from simtrain.parallel.memory_plan import overhead_fraction
    from simtrain.resolve import resolve
    from simtrain.specs.train import TrainConfig
    try:
        r = resolve(model, cluster, TrainConfig.build(None, **fields))
        if r.cluster is not cluster or not _vectorizable(r):  # emulated precision: the scalar path
            return "scalar", None
        cfg, reg, prepared, stack = r.cfg, r.regime, r.model, r.stack
        peak = matrix_peak_flops_per_s(cluster.device, reg.matmul_dtype)
    except (SpecError, SimtrainError) as err:
        return None, str(err)
    variant = _code(tables.setdefault("variant", {}), id(prepared))
    mods = None if cfg.recompute_modules is None else tuple(cfg.recompute_modules)
    # which settings each piece reads (parallel/program.py _setting_key, split by piece)
    sig_c = (variant, str(cfg.precision), cfg.moe_load_imbalance, stack, str(cfg.recompute), mods)
    # the data-parallel side reads of the stack only the fp32 gradient buffer, fp8 gathers and weight casts, prefetch depth,
    # the gathers' copy-out, root unit and gradient copy-in, the wrapper's gradient copies and the reduction's dtype;
    # dp_overlap changes how its collectives hide (vector_rules), not their seconds
    # (the optimizer step reads the implementation and whether fused_optimizer was set: program._setting_key)
    sig_d = (variant, str(cfg.precision), cfg.zero_stage, str(cfg.optimizer), cfg.fused_optimizer,
             getattr(cfg, "optimizer_impl", None), "fused_optimizer" in cfg.model_fields_set, cfg.grad_clipping,
             cfg.zero_grad_to_none,
             cfg.dp_bucket_bytes, stack.grad_fp32_buffer, stack.grad_buffer_16bit, stack.fp8_params, stack.fp8_allgather,
             stack.fp8_weight_cache, stack.fsdp_prefetch_layers, stack.fsdp_gather_copy_out, stack.fsdp_root_unit,
             stack.fsdp_reduce_copy_in,
             stack.dp_grad_copy_passes, stack.grad_reduce_fp32)
    sig_a = (variant, str(cfg.precision), str(cfg.recompute), mods, stack.loss_kernel, stack.transient_memory_scale)
    # the stage's own collectives read the recompute policy only for full recomputation and the stack
    # only for TP overlap (comm_tasks._tp_tasks, tp_hidden_share); ring attention (cp > 1) hides behind op costs: sig_c
    sig_l = (variant, str(cfg.precision), str(cfg.recompute) == "full", stack.tp_comm_overlap,
             stack.tp_dgrad_comm_async,
             stack.comm_compute_slowdown, stack.pp_comm_overlap, stack.recompute_early_stop)
    return _Setting(cfg, prepared, reg, variant, _code(tables.setdefault("c", {}), sig_c),
                    _code(tables.setdefault("l", {}), sig_l),
                    _code(tables.setdefault("d", {}), sig_d), _code(tables.setdefault("a", {}), sig_a),
                    stack.fsdp_prefetch_layers, stack.comm_compute_slowdown, stack.host_dispatch_s,
                    stack.gpu_waits_on_cpu, cfg.zero_stage, cfg.dp_overlap,
                    overhead_fraction(cfg, stack) * cluster.device.usable_memory_bytes,
                    stack.allocator_reserve_fraction, stack.workspace_bytes,
                    _model_flops_per_sample(prepared, cfg.attention_flops), peak, stack.idle_gap_fraction,
                    r.efficiency, stack.syncs_every_micro_batch(cfg.zero_stage), stack.slow_host_fraction,
                    stack.slow_host_step_loss), None


_OUTPUTS = ("step_time_s", "mfu", "hfu", "memory_bytes", "memory_reserved_bytes", "micro_batches", "compute_s",
            "recompute_s", "optimizer_s", "bubble_s", "comm_exposed_s", "interference_s", "idle_gaps_s",
            "stragglers_s")
#: what the sweep's rows need besides (arrays kept with ``frame=False``, not DataFrame columns)
_DETAILS = ("peak_stage", "memory_bound_share", "model_flops", "hardware_flops", "peak_flops_per_s",
            *(f"mem_{t}" for t in MEMORY_TERMS))


def estimate_grid(model, cluster, cfg, grid: dict, *, frame: bool = True):
    """Every point of the cartesian product of ``grid`` (keys: TrainConfig fields and ``nodes``; in the
    order of ``st.sweep``: keys sorted, the last varying fastest). A ``virtual_stages`` axis without a
    ``pipeline_schedule`` axis runs its values above 1 on the interleaved 1F1B schedule. A DataFrame, or with ``frame=False``
    a dict of numpy arrays (the axes as codes into ``result["axes"]``)."""
    keys = sorted(grid)
    for k in keys:
        if not isinstance(grid[k], (list, tuple)) or not grid[k]:
            raise SpecError.one(None, f"grid.{k}", "must be a non-empty list of values")
    sizes = [len(grid[k]) for k in keys]
    n = math.prod(sizes)
    codes, inner = {}, n
    for k, size in zip(keys, sizes, strict=True):
        inner //= size
        codes[k] = np.tile(np.repeat(np.arange(size, dtype=np.int32), inner), n // (inner * size))
    return _run(model, cluster, cfg, codes, {k: list(grid[k]) for k in keys}, n, frame)


def estimate_points(model, cluster, cfg, points, *, frame: bool = True):
    """One row per configuration of ``points``: a DataFrame or a dict of equal-length columns."""
    if isinstance(points, (list, tuple)):  # rows as dicts: their values as given (pandas would make None NaN)
        keys = list(dict.fromkeys(k for p in points for k in p))
        if any(len(p) != len(keys) for p in points):
            raise SpecError.one(None, "points", f"every point must give the same keys ({', '.join(keys)})")
        columns = {k: [p[k] for p in points] for k in keys}
    else:
        import pandas as pd
        table = pd.DataFrame(points)
        columns = {k: table[k].tolist() for k in table.columns}
    codes, uniques = {}, {}
    for k, values in columns.items():
        seen: dict = {}  # keyed by (type, value): True stays apart from 1
        codes[k] = np.array([seen.setdefault((type(v), v), len(seen)) for v in values], dtype=np.int32)
        uniques[k] = [v for _, v in seen]
    return _run(model, cluster, cfg, codes, uniques, len(next(iter(columns.values()), [])), frame)


def _check_keys(keys) -> bool:
    """Raise on keys that are no TrainConfig field; True when every key is one the vector path covers."""
    from simtrain.specs.train import TrainConfig
    for k in keys:
        if k != "nodes" and k not in TrainConfig.model_fields:
            raise SpecError.one(None, f"grid.{k}", "is not a TrainConfig field (or 'nodes')")
    return all(k in LAYOUT_AXES or k in SETTING_AXES for k in keys)


def _distinct(codes: dict, uniques: dict, axes: list[str], n: int):
    """(code per point, [{axis: value}] per distinct combination of ``axes``)."""
    from simtrain.search.vector_core import factor
    if not axes:
        return np.zeros(n, dtype=np.int64), [{}]
    inv, first = factor([codes[a] for a in axes])
    return inv, [{a: uniques[a][codes[a][i]] for a in axes} for i in first]


def _hashable(fields: dict) -> tuple:
    return tuple((k, type(v).__name__, v) for k, v in sorted(fields.items()))


def _cached(cache: dict, name: str, fields: dict, make):
    """``make()`` once per distinct ``fields`` in ``cache[name]`` (kept alive there: the memo keys of
    vector_core hold ids of the models and clusters these hold)."""
    table = cache.setdefault(name, {})
    key = _hashable(fields)
    if key not in table:
        table[key] = make()
    return table[key]


def _run(model, cluster, cfg, codes: dict, uniques: dict, n: int, frame: bool, bar=None, *, scalar: bool = True,
         cache: dict | None = None, interleave: bool = True):
    """``interleave=False`` drops the convenience of :func:`estimate_grid` (a ``virtual_stages`` axis
    without a schedule axis interleaves): the sweep's rows are TrainConfig's. ``scalar=False`` leaves the points the factoring does not cover uncosted (``out["path"]`` says
    which: :data:`PATHS`) for the caller to evaluate its own way; ``cache``: a dict kept between calls
    over the same model, cluster and base config (the sweep's chunks), holding what they share."""
    from simtrain.inputs import as_cluster, as_config, as_model
    model, cluster, cfg = as_model(model), as_cluster(cluster), as_config(cfg)
    cache = {} if cache is None else cache
    covered = _check_keys(codes)
    base = cfg.model_dump(exclude_unset=True)
    lay_axes = [k for k in LAYOUT_AXES if k in codes] if covered else list(codes)
    set_axes = [k for k in SETTING_AXES if k in codes] if covered else []
    l_inv, l_vals = _distinct(codes, uniques, lay_axes, n)
    s_inv, s_vals = _distinct(codes, uniques, set_axes, n)
    facts_model = cache.get("facts_model") or cache.setdefault("facts_model", model.with_seq_len(cfg.seq_len))
    if interleave and "virtual_stages" in codes and "pipeline_schedule" not in codes:  # v > 1: interleaving
        for f in l_vals:
            if f["virtual_stages"] > 1:
                f["pipeline_schedule"] = "interleaved-1f1b"
    checked = cache.setdefault("checked", {})
    layouts = [_cached(cache, "layouts", f, lambda f=f: layout_of(
        facts_model, cluster, cfg, {k: v for k, v in f.items() if k != "nodes"}, f.get("nodes"), checked))
        if covered else layout_of_point(facts_model, cluster, base, f) for f in l_vals]
    tables = cache.setdefault("tables", {})
    settings = [_cached(cache, "settings", f, lambda f=f: _setting(model, cluster, {**base, **f}, tables))
                if covered else ("scalar", None) for f in s_vals]
    out = {k: np.full(n, np.nan) for k in (*_OUTPUTS, *_DETAILS)}
    out.update(feasible=np.zeros(n, dtype=bool), valid=np.zeros(n, dtype=bool), dp=np.zeros(n, dtype=np.int64),
               devices=np.zeros(n, dtype=np.int64), gbs=np.zeros(n, dtype=np.int64), errors={},
               ranks_per_stage=np.zeros(n, dtype=np.int64))
    reasons = np.array([r for _, r in layouts] + [r for _, r in settings] + [OOM_REASON, ""], dtype=object)
    l_ok = np.array([lay is not None for lay, _ in layouts])[l_inv]
    s_state = np.array([0 if s is None else (1 if isinstance(s, str) else 2) for s, _ in settings])[s_inv]
    # a split backward (zb-h1, dualpipev) runs task kinds the factored core does not cost: point by point
    split = np.array([lay is not None and lay[2].pipeline_schedule in SPLIT_BACKWARD for lay, _ in layouts],
                     dtype=bool)[l_inv]
    s_state = np.where(split & (s_state == 2), 1, s_state)
    why = np.where(~l_ok, l_inv, len(layouts) + s_inv)
    scalar_idx = np.flatnonzero(l_ok & (s_state == 1))
    vector = np.flatnonzero(l_ok & (s_state == 2))
    if bar is not None:  # points rejected before costing are done at once
        bar.update(n - len(vector) - (len(scalar_idx) if scalar else 0))
    _vector_points(vector, layouts, settings, l_inv, s_inv, out, bar, cache.setdefault("memo", {}))
    if scalar:
        _scalar_points(scalar_idx, model, base, l_vals, s_vals, l_inv, s_inv, layouts, codes, uniques, out, covered,
                       bar)
    ran = out["valid"]
    why = np.where(ran, np.where(out["feasible"], len(reasons) - 1, len(reasons) - 2), why)
    out["reasons"] = reasons[why]
    for i, text in out.pop("errors").items():
        out["reasons"][i] = text
    out["tokens_per_sample"] = facts_model.tokens_per_sample
    if not frame:
        out["axes"] = (codes, uniques)
        out["path"] = np.where(~l_ok, PATHS.index("layout"), np.where(s_state == 0, PATHS.index("setting"),
                               np.where(s_state == 1, PATHS.index("scalar"), PATHS.index("vector"))))
        out.update(l_inv=l_inv, s_inv=s_inv, layouts=layouts, settings=settings)
        return out
    return _frame(codes, uniques, out)


def _vector_points(idx, layouts, settings, l_inv, s_inv, out: dict, bar=None, memo: dict | None = None) -> None:
    from simtrain.search.vector_core import evaluate_group, factor
    if not len(idx):
        return
    from simtrain.glossary import PipelineSchedule
    scheds = list(PipelineSchedule)
    clusters: dict = {}
    cluster_of = {}
    num = np.zeros((len(layouts), 12), dtype=np.int64)
    for j, (lay, _) in enumerate(layouts):
        if lay is None:
            continue
        target, dp, c = lay
        code = _code(clusters, id(target))
        cluster_of[code] = target
        num[j] = (code, dp, c.tp, c.pp, c.cp, c.ep, c.micro_batch_size, c.virtual_stages,
                  scheds.index(c.pipeline_schedule), c.sequence_parallel, c.global_batch_size, target.devices_count)
    p = num[l_inv[idx]]
    variant = np.array([s.variant if isinstance(s, _Setting) else -1 for s, _ in settings])[s_inv[idx]]
    g_inv, g_first = factor([p[:, 0], p[:, 3], p[:, 7], p[:, 8], variant])
    memo = {} if memo is None else memo
    for gi in range(len(g_first)):
        sel = np.flatnonzero(g_inv == gi)
        pts, q = idx[sel], p[sel]
        local_s, s_code = np.unique(s_inv[pts], return_inverse=True)
        group_settings = [settings[j][0] for j in local_s]
        s_code = s_code.reshape(-1)
        c = {"tp": q[:, 2], "dp": q[:, 1], "cp": q[:, 4], "ep": q[:, 5], "mb": q[:, 6], "sp": q[:, 9].astype(bool),
             "gbs": q[:, 10], "S": s_code}
        for sig in ("sig_c", "sig_l", "sig_d", "sig_a"):
            c[sig] = np.array([getattr(s, sig) for s in group_settings])[s_code]
        # ring attention overlaps op costs, which read every compute setting
        # (a code that does not depend on the chunk: the memo outlives it when a sweep passes a cache)
        c["sig_l"] = np.where(c["cp"] > 1, c["sig_l"] + _SIG_RADIX * (1 + c["sig_c"]), c["sig_l"])
        res = evaluate_group(cluster_of[int(q[0, 0])], int(q[0, 3]), int(q[0, 7]), scheds[int(q[0, 8])],
                             group_settings[0].model, group_settings, c, memo)
        for k in (*_OUTPUTS, *_DETAILS):
            out[k][pts] = res[k]
        out["feasible"][pts], out["valid"][pts] = res["feasible"], True
        out["dp"][pts], out["devices"][pts], out["gbs"][pts] = q[:, 1], q[:, 11], q[:, 10]
        out["ranks_per_stage"][pts] = q[:, 1] * q[:, 2] * q[:, 4]  # dp · tp · cp: a stage's first rank
        if bar is not None:
            bar.update(len(pts))


def _scalar_points(idx, model, base, l_vals, s_vals, l_inv, s_inv, layouts, codes, uniques, out, covered,
                   bar=None) -> None:
    """Points the factoring does not cover: ``st.estimate`` each (exact)."""
    from simtrain.estimator import estimate
    from simtrain.specs.train import TrainConfig
    for i in idx:
        fields = {**base, **{k: v for k, v in l_vals[l_inv[i]].items() if k != "nodes"}, **s_vals[s_inv[i]]}
        if not covered:
            fields.update({k: uniques[k][codes[k][i]] for k in codes if k != "nodes"})
        target, dp, _ = layouts[l_inv[i]][0]
        cfg = TrainConfig.build(None, **fields)
        r = estimate(model, target, cfg)
        if bar is not None:
            bar.update(1)
        out["dp"][i], out["devices"][i], out["gbs"][i] = dp, target.devices_count, cfg.global_batch_size
        if r.memory is None:  # the estimate could not cost it (e.g. a precision the device lacks)
            out["errors"][i] = "; ".join(r.reasons)
            continue
        out["valid"][i] = True
        b = r.time_breakdown_s
        vals = dict(step_time_s=r.step_time_s, mfu=r.mfu, hfu=r.hfu, memory_bytes=r.memory.total_bytes,
                    memory_reserved_bytes=r.memory.reserved_bytes, micro_batches=r.layout["micro_batches"],
                    compute_s=b["compute"], recompute_s=b["recompute"], optimizer_s=b["optimizer"],
                    bubble_s=b["pipeline_bubble"], comm_exposed_s=b["comm_exposed"],
                    interference_s=b["interference"], idle_gaps_s=b["idle_gaps"], stragglers_s=b["stragglers"])
        for k, v in vals.items():
            out[k][i] = v
        out["feasible"][i] = r.feasible


def _frame(codes: dict, uniques: dict, out: dict):
    import pandas as pd
    cols = {}
    for k in codes:
        values = uniques[k]
        arr = np.empty(len(values), dtype=object)
        arr[:] = values
        cols[k] = arr[codes[k]]
        if all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in values):
            cols[k] = cols[k].astype(np.int64)
    df = pd.DataFrame(cols)
    for k in ("valid", "feasible", *_OUTPUTS, "reasons"):
        df[k] = out[k]
    if "dp" not in codes:
        df["dp"] = out["dp"]
    df["devices"] = out["devices"]
    with np.errstate(divide="ignore", invalid="ignore"):
        df["samples_per_s"] = np.where(out["valid"], out["gbs"] / out["step_time_s"], np.nan)
    df["tokens_per_s"] = df["samples_per_s"] * out["tokens_per_sample"]
    return df


def estimate_codes(model, cluster, cfg, codes: dict, uniques: dict, *, frame: bool = True, bar=None):
    """As :func:`estimate_points` with the columns already coded: ``codes[axis]`` an int array of
    indices into ``uniques[axis]`` (the planner builds its candidates this way, without a row loop).
    ``bar``: a progress bar (``update(k)``) advanced as points are costed."""
    n = len(next(iter(codes.values()))) if codes else 1
    return _run(model, cluster, cfg, codes, uniques, n, frame, bar)
