"""st.plan: how many devices, and which layout, to train ``tokens`` tokens by a deadline, under a budget.

Searches node counts × tp × pp × dp × cp × ep × micro-batch × virtual stages × sequence parallelism ×
ZeRO stage × recompute policy (search/plan_space.py) with the vectorized estimate (search/vector.py:
the estimate's own cost rules), keeps the layouts that fit in memory, finish by ``deadline_s``, cost at
most ``budget_usd`` and use at most ``max_devices``, and ranks them by ``objective``:

* ``cost`` — US dollars = devices × hours × the device's price per hour (``StepReport.cost_dollars``;
  device-hours when the spec has no price);
* ``time`` — time to train = tokens / (global batch × tokens per sample) × step time
  (``StepReport.time_to_train``);
* ``energy`` — device energy, ``StepReport.ENERGY_MODEL``: devices × time × (idle + (TDP − idle) ×
  busy fraction), busy = (compute + recompute + optimizer) / step.

Returns a DataFrame of the top ``top`` layouts, one row per distinct job, with a ``why`` column (what
makes each win); ``df.attrs["pareto"]`` holds the time / cost / energy Pareto front of every layout
that meets the constraints (:func:`pareto_front`). When nothing qualifies the frame is empty and
``df.attrs["explanation"]`` says why, with the closest misses in ``df.attrs["closest"]``.
"""

from __future__ import annotations

import math

import numpy as np

from simtrain.errors import SimtrainError
from simtrain.search.plan_pareto import pareto_front, why_lines
from simtrain.search.plan_space import SETTINGS, layout_rows, min_nodes, node_counts
from simtrain.sim.young_daly import checkpoint_bytes_of, daly_interval_s, daly_wall_s

__all__ = ["plan", "pareto_front", "OBJECTIVES"]

OBJECTIVES = ("cost", "time", "energy")
_LAYOUT = ("nodes", "tp", "pp", "cp", "ep", "dp", "micro_batch_size", "virtual_stages", "sequence_parallel")
_SORT = {"cost": ["cost_usd", "device_hours", "time_to_train_s"], "time": ["time_to_train_s", "cost_usd", "devices"],
         "energy": ["energy_kwh", "time_to_train_s", "devices"]}


def _positive(name: str, value, allow_none: bool = True):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise SimtrainError(f"plan: {name}= must be a positive number, got {value!r}")
    return value


def _whole(name: str, value, lowest: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
        raise SimtrainError(f"plan: {name}= must be a whole number ≥ {lowest}, got {value!r}")
    return value


def _fixed(codes: dict, uniques: dict, cfg) -> np.ndarray:
    """Candidates that keep what ``config=`` set of the searched fields (a plan honours a config's tp,
    ZeRO stage or recompute policy instead of searching over it)."""
    keep = np.ones(len(codes["nodes"]), dtype=bool)
    for name in (*_LAYOUT[1:], "zero_stage", "recompute"):
        if name in cfg.model_fields_set and getattr(cfg, name) is not None:
            want = getattr(cfg, name)
            want = str(want) if name == "recompute" else want
            hits = [i for i, v in enumerate(uniques[name]) if v == want]
            keep &= np.isin(codes[name], hits)
    return keep


def _fixed_text(cfg) -> str:
    return ", ".join(f"{k}={getattr(cfg, k)}" for k in (*_LAYOUT[1:], "zero_stage", "recompute")
                     if k in cfg.model_fields_set)


def _inputs(model, hardware, precision, global_batch_size, seq_len, stack, config):
    from simtrain.inputs import as_cluster, as_model
    from simtrain.specs.train import TrainConfig
    model, cluster = as_model(model), as_cluster(hardware, arg="hardware")
    fields = {"global_batch_size": global_batch_size, "seq_len": seq_len, "precision": precision, **(config or {})}
    if stack is not None:
        fields["stack"] = stack
    return model, cluster, TrainConfig.build(None, **fields)


def _candidates(model, cluster, cfg, tokens, deadline_s, max_devices, max_nodes, max_pp):
    """Coded candidate columns (see search/vector.estimate_codes) and the node counts searched."""
    from simtrain.cost.compute import matrix_peak_flops_per_s
    from simtrain.cost.precision import regime
    from simtrain.estimator import _model_flops_per_sample
    prepared = model.with_seq_len(cfg.seq_len)
    per_node = cluster.node.devices_count
    hi = max_nodes if cluster.network is not None else 1
    if max_devices is not None:
        hi = min(hi, int(max_devices) // per_node)
    if hi < 1:
        raise SimtrainError(f"plan: max_devices={max_devices} is less than one node of {per_node} devices")
    try:
        peak = matrix_peak_flops_per_s(cluster.device, regime(cfg.precision).matmul_dtype)
    except SimtrainError:
        peak = 0.0
    per_token = _model_flops_per_sample(prepared, cfg.attention_flops) / prepared.tokens_per_sample
    lo = min(hi, min_nodes(tokens, per_token, deadline_s, peak, per_node))
    nodes = node_counts(lo, hi)
    rows = layout_rows(prepared.layout_facts(), per_node, nodes, cfg.global_batch_size, cfg.seq_len, max_pp)
    settings = [(z, r) for z in SETTINGS["zero_stage"] for r in SETTINGS["recompute"]]
    n_set = len(settings)
    codes, uniques = {}, {}
    for j, name in enumerate(_LAYOUT):
        vals, inv = np.unique(rows[:, j], return_inverse=True)
        uniques[name] = [bool(x) if name == "sequence_parallel" else int(x) for x in vals]
        codes[name] = np.repeat(inv.reshape(-1).astype(np.int32), n_set)
    for j, name in enumerate(("zero_stage", "recompute")):
        uniques[name] = list(SETTINGS[name])
        codes[name] = np.tile(np.array([uniques[name].index(s[j]) for s in settings], dtype=np.int32), len(rows))
    return codes, uniques, nodes


def _table(codes, uniques, res, cluster, cfg, tokens):
    import pandas as pd
    cols = {k: np.asarray(uniques[k], dtype=object)[codes[k]] for k in codes}
    df = pd.DataFrame(cols)
    for k in _LAYOUT[:-1] + ("zero_stage",):
        df[k] = df[k].astype(np.int64)
    df["sequence_parallel"] = df["sequence_parallel"].astype(bool)
    df["pipeline_schedule"] = np.where(df["virtual_stages"] > 1, "interleaved-1f1b", str(cfg.pipeline_schedule))
    for k in ("valid", "feasible", "step_time_s", "mfu", "memory_bytes", "memory_reserved_bytes", "reasons"):
        df[k] = res[k]
    dev = cluster.device
    df["devices"] = df["nodes"] * cluster.node.devices_count
    steps = tokens / (cfg.global_batch_size * res["tokens_per_sample"])
    df["time_to_train_s"] = steps * df["step_time_s"]
    df["time_to_train_days"] = df["time_to_train_s"] / 86400.0
    df["device_hours"] = df["devices"] * df["time_to_train_s"] / 3600.0
    price = dev.price_per_hour.value if dev.price_per_hour is not None else math.nan
    df["cost_usd"] = df["device_hours"] * price
    df["energy_kwh"] = _energy_kwh(df, res, dev)
    df["bubble_fraction"] = res["bubble_s"] / df["step_time_s"]
    df["memory_headroom_bytes"] = dev.usable_memory_bytes - df["memory_reserved_bytes"]
    return df


def _with_failures(df, ckpt_bytes: float, mtbf_device_s: float, restart_s: float, write_bytes_per_s):
    """Time, device-hours, cost and energy of each row under exponential failures (Daly 2006)."""
    _positive("mtbf_device_s", mtbf_device_s, allow_none=False)
    _positive("restart_s", restart_s, allow_none=False)
    if write_bytes_per_s is None:
        raise SimtrainError("plan: mtbf_device_s= needs checkpoint_write_bytes_per_s= (the storage's write rate)")
    _positive("checkpoint_write_bytes_per_s", write_bytes_per_s, allow_none=False)
    save_s = ckpt_bytes / write_bytes_per_s
    mtbf = mtbf_device_s / df["devices"].to_numpy(dtype=float)
    solve = df["time_to_train_s"].to_numpy(dtype=float)
    interval = np.array([daly_interval_s(save_s, m) for m in mtbf])
    wall = np.array([daly_wall_s(t, tau, save_s, restart_s, m) if np.isfinite(t) else np.nan
                     for t, tau, m in zip(solve, interval, mtbf, strict=True)])
    scale = wall / solve
    out = df.assign(goodput=1.0 / scale, checkpoint_interval_s=interval, job_mtbf_s=mtbf)
    for col in ("time_to_train_s", "time_to_train_days", "device_hours", "cost_usd", "energy_kwh"):
        out[col] = out[col] * scale
    return out


def _energy_kwh(df, res, dev):
    """StepReport.energy_kwh over the time to train (ENERGY_MODEL); NaN without a TDP."""
    from simtrain.report.step_report import J_PER_KWH, device_watts, full_load_watts
    full = full_load_watts(dev)
    if full is None:
        return np.full(len(df), np.nan)
    step = df["step_time_s"].to_numpy()
    busy = np.minimum(1.0, (res["compute_s"] + res["recompute_s"] + res["optimizer_s"]) / step)
    idle = dev.idle_power_w.value if dev.idle_power_w is not None else None
    watts = device_watts(full, idle, busy)
    return df["devices"].to_numpy() * watts * df["time_to_train_s"].to_numpy() / J_PER_KWH


def _explain(df, deadline_s, budget_usd) -> tuple[str, object]:
    """Why nothing qualifies, and the closest misses."""
    ran = df[df["valid"]]
    if ran.empty:
        reasons = df["reasons"].value_counts().head(3).index.tolist()
        return "no searched layout can run: " + " | ".join(reasons), df.head(0)
    fits = ran[ran["feasible"]]
    if fits.empty:
        m = ran.sort_values("memory_reserved_bytes").iloc[0]
        return (f"nothing fits in memory: the smallest peak reserves {m.memory_reserved_bytes / 2**30:.1f} GiB "
                f"({int(m.devices)} devices, tp={m.tp} pp={m.pp} dp={m.dp}, ZeRO-{m.zero_stage}, "
                f"recompute {m.recompute}) of {(m.memory_reserved_bytes - m.memory_headroom_bytes) / 2**30:.1f} GiB usable"), \
            ran.sort_values("memory_reserved_bytes").head(5)
    miss = np.ones(len(fits))
    parts = []
    if deadline_s is not None:
        miss = np.maximum(miss, fits["time_to_train_s"].to_numpy() / deadline_s)
        f = fits.sort_values("time_to_train_s").iloc[0]
        parts.append(f"the fastest layout ({int(f.devices)} devices) needs {f.time_to_train_days:.1f} days "
                     f"(deadline {deadline_s / 86400:.1f})")
    if budget_usd is not None:
        miss = np.maximum(miss, fits["cost_usd"].to_numpy() / budget_usd)
        c = fits.sort_values("cost_usd").iloc[0]
        parts.append(f"the cheapest costs ${c.cost_usd:,.0f} (budget ${budget_usd:,.0f})")
    closest = fits.assign(miss_factor=miss).sort_values("miss_factor").head(5)
    best = closest.iloc[0]
    parts.append(f"closest: {int(best.devices)} devices misses by ×{best.miss_factor:.2f}")
    return "no layout meets the constraints: " + "; ".join(parts), closest


def _check_arguments(tokens, deadline_s, budget_usd, max_devices, objective, top, max_nodes, max_pp, config) -> None:
    """Every plan argument checked before any work (a SimtrainError naming it)."""
    _positive("tokens", tokens, allow_none=False)
    _positive("deadline_s", deadline_s)
    _positive("budget_usd", budget_usd)
    _positive("max_devices", max_devices)
    if objective not in OBJECTIVES:
        raise SimtrainError(f"plan: objective= must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    _whole("top", top)
    _whole("max_nodes", max_nodes)
    _whole("max_pp", max_pp)
    if config is not None and not isinstance(config, dict):
        raise SimtrainError(f"plan: config= must be a dict of TrainConfig fields, got {type(config).__name__}")


def _searched(model, cluster, cfg, tokens, deadline_s, max_devices, max_nodes, max_pp):
    """The candidates (codes, uniques, node counts) that keep what ``config=`` fixed; a SimtrainError
    when none is left."""
    codes, uniques, nodes = _candidates(model, cluster, cfg, tokens, deadline_s, max_devices, max_nodes, max_pp)
    keep = _fixed(codes, uniques, cfg)
    if not keep.all():
        codes = {k: v[keep] for k, v in codes.items()}
        if not len(codes["nodes"]):
            raise SimtrainError("plan: no searched layout has the tp / pp / cp / ep / dp / micro-batch / virtual "
                                f"stages that config= fixes ({_fixed_text(cfg)})")
    if not len(codes["nodes"]):
        raise SimtrainError(f"plan: no layout of nodes {nodes[0]}..{nodes[-1]} splits global_batch_size="
                            f"{cfg.global_batch_size} evenly over its data-parallel ranks")
    return codes, uniques, nodes


def plan(model, hardware, tokens: float, deadline_s: float | None = None, *, budget_usd: float | None = None,
         max_devices: int | None = None, objective: str = "cost", global_batch_size: int = 1024,
         seq_len: int | None = None, precision: str = "bf16", stack: str | None = None, config: dict | None = None,
         max_nodes: int = 512, max_pp: int = 16, top: int = 20, mtbf_device_s: float | None = None,
         restart_s: float = 600.0, checkpoint_write_bytes_per_s: float | None = None,
         progress: bool | None = None):
    """Ranked layouts and cluster sizes (see the module docstring). ``model``: a Model or a library
    name; ``hardware``: a Cluster or a cluster name; ``config``: further TrainConfig fields.

    Goodput-aware with ``mtbf_device_s`` (and ``checkpoint_write_bytes_per_s``, ``restart_s``):
    each layout's time to train becomes Daly's expected wall time at his optimal checkpoint interval
    (sim/young_daly.py; job MTBF = device MTBF / devices), so a larger cluster pays for its failures;
    cost and energy scale with it, and ``goodput`` = failure-free time / wall time.

    ``progress``: a tqdm bar over the candidate layouts on stderr, as ``st.sweep``'s (None: on a
    terminal once past 2 s; True: always; False: never)."""
    _check_arguments(tokens, deadline_s, budget_usd, max_devices, objective, top, max_nodes, max_pp, config)
    from simtrain.search.vector import estimate_codes
    model, cluster, cfg = _inputs(model, hardware, precision, global_batch_size, seq_len, stack, config)
    codes, uniques, nodes = _searched(model, cluster, cfg, tokens, deadline_s, max_devices, max_nodes, max_pp)
    from simtrain.search.sweep import progress_bar
    with progress_bar(len(codes["nodes"]), 0, progress, desc="plan") as bar:
        res = estimate_codes(model, cluster, cfg, codes, uniques, frame=False, bar=bar)
    df = _table(codes, uniques, res, cluster, cfg, tokens)
    if mtbf_device_s is not None:
        df = _with_failures(df, checkpoint_bytes_of(model, cfg), mtbf_device_s, restart_s, checkpoint_write_bytes_per_s)
    ok = df["valid"] & df["feasible"]
    if deadline_s is not None:
        ok &= df["time_to_train_s"] <= deadline_s
    if budget_usd is not None:
        ok &= df["cost_usd"] <= budget_usd
    # one row per job; settings that change nothing (selective recomputation when attention is fused
    # already recomputes its scores) give the same step and memory: the simpler setting stays
    good = df[ok].drop_duplicates(subset=[*_LAYOUT, "zero_stage", "recompute"])
    good = good.drop_duplicates(subset=[*_LAYOUT, "step_time_s", "memory_reserved_bytes"])
    ranked = good.sort_values(_SORT[objective], kind="stable").head(top)
    front = pareto_front(good)
    ranked = ranked.assign(why=why_lines(ranked, objective, set(front.index))).reset_index(drop=True)
    ranked = ranked.drop(columns=["valid", "reasons"])
    ranked.attrs["pareto"] = front.drop(columns=["valid", "reasons"]).reset_index(drop=True)
    ranked.attrs["candidates"] = good[["devices", "time_to_train_days", "cost_usd", "device_hours",
                                       "energy_kwh"]].reset_index(drop=True)
    ranked.attrs["nodes_searched"] = nodes
    ranked.attrs["layouts_searched"] = int(len(df))
    if ranked.empty:
        ranked.attrs["explanation"], ranked.attrs["closest"] = _explain(df, deadline_s, budget_usd)
    else:
        ranked.attrs["closest"] = df[df["valid"] & df["feasible"]].sort_values("time_to_train_s").head(5)
    return ranked
