"""The sweep's default engine, ``auto``: sweep rows from the vectorized estimate, as one Arrow table.

``auto_table`` gives, for points of a grid given as codes (``codes[axis]`` indices into
``uniques[axis]``), exactly the rows ``sweep_rows.evaluate_point(..., engine="estimate")`` gives —
same columns, numbers, statuses, reasons and warnings:

* points the factoring costs (search/vector.py) become rows column by column: the breakdown,
  bottleneck (``report.explain.bottleneck_of`` as arrays), the out-of-memory reason
  (``MemoryReport.overflow_reason``) and the sanity warnings (``report.sanity.sanity_warnings``, run on a
  stand-in report for the few points that screen positive);
* points whose layout was rejected take the row of one representative point of that layout (the
  reason names the layout's values only), the same for points whose settings were rejected;
* everything else — settings outside the factoring, an FPGA or wafer (whose rows carry a per-device
  note), a point whose layout *and* settings are bad — is ``evaluate_point`` itself.

``tests/unit/test_sweep_auto.py`` holds the rows equal to the scalar ones on random points.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from types import SimpleNamespace

import numpy as np

import simtrain.search.sweep_rows as sweep_rows
from simtrain.report.step_report import (
    BREAKDOWN_KEYS,
    MEMORY_TERM_NAMES,
    MemoryReport,
    overflow_text,
    reserved_bytes_of,
)
from simtrain.search.sweep_rows import RESULT_COLUMNS, _canonical, _plain
from simtrain.search.vector import PATHS, _run
from simtrain.search.vector_core import MEMORY_TERMS

__all__ = ["auto_table", "auto_rows", "grid_codes", "point_keys", "point_at"]

_BOTTLENECKS = np.array(["compute", "memory_bandwidth", "communication", "data", "bubble"], dtype=object)
#: breakdown parts the vectorized path computes (the others are 0 on every point it covers: no data
#: pipeline, no host gaps, no rank variation — vector._vectorizable; slow hosts are a share of the span)
_PARTS = {"compute": "compute_s", "recompute": "recompute_s", "comm_exposed": "comm_exposed_s",
          "pipeline_bubble": "bubble_s", "optimizer": "optimizer_s", "interference": "interference_s",
          "idle_gaps": "idle_gaps_s", "stragglers": "stragglers_s"}


def grid_codes(grid: dict[str, list]) -> tuple[list[str], dict, dict]:
    """(keys sorted, {key: values}, {key: int array}) of the grid's cartesian product in sweep order
    (keys sorted, the last varying fastest: ``sweep_rows.grid_points``)."""
    keys = sorted(grid)
    uniques = {k: [_plain(v) for v in grid[k]] for k in keys}
    n = math.prod(len(uniques[k]) for k in keys)
    codes, inner = {}, n
    for k in keys:
        size = len(uniques[k])
        inner //= size
        codes[k] = np.tile(np.repeat(np.arange(size, dtype=np.int32), inner), n // (inner * size))
    return keys, uniques, codes


def point_keys(keys: list[str], uniques: dict, codes: dict | None = None) -> list[str]:
    """``sweep_rows.point_key`` of every coded point (``codes`` None: the whole grid in sweep order),
    without building the points: the canonical JSON text is the join of per-value fragments (json.dumps
    with sorted keys and its default separators)."""
    frags = [[f"{json.dumps(k)}: {json.dumps(_canonical(v))}" for v in uniques[k]] for k in keys]
    if codes is None:
        rows = itertools.product(*frags)
    else:
        rows = zip(*(np.array(f, dtype=object)[np.asarray(codes[k])] for f, k in zip(frags, keys, strict=True)),
                   strict=True)
    sha = hashlib.sha256
    return [sha(("{" + ", ".join(row) + "}").encode()).hexdigest()[:16] for row in rows]


def point_at(keys, uniques, codes, i: int) -> dict:
    """Point ``i`` of coded columns as the ``{key: value}`` dict the scalar engines take."""
    return {k: uniques[k][codes[k][i]] for k in keys}


class _Columns:
    """The result columns of ``n`` rows, filled by index (numbers as numpy, text as object arrays)."""

    def __init__(self, n: int) -> None:
        self.num = {c: np.full(n, np.nan) for c in RESULT_COLUMNS
                    if c not in ("feasible", "memory_fits", "status", "bottleneck", "reasons", "warnings",
                                 "devices_count")}
        self.flag = {c: np.zeros(n, dtype=bool) for c in ("feasible", "memory_fits")}
        self.text = {c: np.full(n, "", dtype=object) for c in ("status", "bottleneck", "reasons", "warnings")}
        self.devices = np.zeros(n, dtype=np.int64)
        self.no_devices = np.zeros(n, dtype=bool)

    def put_rows(self, idx, rows: list[dict], which) -> None:
        """Scalar rows (dicts of evaluate_point): ``rows[which[j]]`` at index ``idx[j]``."""
        if not rows:
            return
        for c, arr in self.num.items():
            arr[idx] = np.array([r[c] for r in rows], dtype=float)[which]
        for c, arr in self.flag.items():
            arr[idx] = np.array([bool(r[c]) for r in rows])[which]
        for c, arr in self.text.items():
            arr[idx] = np.array([r[c] for r in rows], dtype=object)[which]
        devices = [r["devices_count"] for r in rows]
        self.no_devices[idx] = np.array([d is None for d in devices])[which]
        self.devices[idx] = np.array([0 if d is None else d for d in devices], dtype=np.int64)[which]


def _vector_columns(cols: _Columns, idx, out: dict, model, cluster, gbs) -> None:
    """The rows of the points the factoring costed, from its arrays."""
    step = out["step_time_s"][idx]
    feasible = out["feasible"][idx]
    cols.flag["feasible"][idx] = feasible
    cols.flag["memory_fits"][idx] = feasible
    cols.text["status"][idx] = np.where(feasible, "ok", "infeasible")
    n = cols.num
    n["step_time_s"][idx] = step
    with np.errstate(divide="ignore", invalid="ignore"):
        samples = np.where(step > 0, gbs / step, 0.0)
    n["samples_per_s"][idx], n["tokens_per_s"][idx] = samples, samples * out["tokens_per_sample"]
    for c in ("mfu", "hfu", "memory_bytes", "memory_reserved_bytes"):
        n[c][idx] = out[c][idx]
    parts = {p: (out[_PARTS[p]][idx] if p in _PARTS else np.zeros(len(idx))) for p in BREAKDOWN_KEYS}
    for p, values in parts.items():
        n[f"time_{p}_s"][idx] = values
    cols.devices[idx] = out["devices"][idx]
    cols.text["bottleneck"][idx] = _bottleneck(parts, out["memory_bound_share"][idx], step)
    _oom_reasons(cols, idx[~feasible], out, cluster)
    _warnings(cols, idx[feasible], out, model, cluster, parts, np.flatnonzero(feasible))


def _bottleneck(b: dict, mem_share, step):
    """``report.explain.bottleneck_of`` over arrays (the first of the largest shares wins, as ``max``)."""
    busy = b["compute"] + b["recompute"]
    shares = np.stack([busy * (1 - mem_share) + b["optimizer"] * 0.0, busy * mem_share + b["optimizer"],
                       b["comm_exposed"], b["data_stall"], b["pipeline_bubble"]], axis=1)
    return np.where(step <= 0, "compute", _BOTTLENECKS[np.argmax(shares, axis=1)])


def _memory(out: dict, i: int, cluster) -> MemoryReport:
    """The peak rank's MemoryReport of point ``i`` (``memory_plan.stage_memory``'s fields)."""
    setting = out["settings"][out["s_inv"][i]][0]
    stage = int(out["peak_stage"][i])
    terms = {f"{t}_bytes": float(out[f"mem_{t}"][i]) for t in MEMORY_TERMS}
    return MemoryReport(**terms, capacity_bytes=cluster.device.usable_memory_bytes,
                        rank=stage * int(out["ranks_per_stage"][i]), stage=stage, reserve_fraction=setting.reserve,
                        workspace_bytes=setting.workspace)


def _oom_reasons(cols: _Columns, idx, out: dict, cluster) -> None:
    """``MemoryReport.overflow_reason`` of the points that do not fit, from the arrays (the MemoryReport
    properties in their own order, so that the numbers printed are the scalar ones)."""
    if not len(idx):
        return
    t = {name: out[f"mem_{name}"][idx] for name in MEMORY_TERMS}
    knob = lambda name: np.array([getattr(s, name, 0.0) for s, _ in out["settings"]])[out["s_inv"][idx]]  # noqa: E731
    total = t["params"] + t["grads"] + t["optimizer"] + t["activations"] + t["buffers"] + t["overhead"]
    reserved = reserved_bytes_of(t["params"] + t["grads"] + t["optimizer"], t["activations"] + t["buffers"]
                                 + t["overhead"], knob("reserve"), knob("workspace"))
    capacity = cluster.device.usable_memory_bytes
    terms = np.stack([t[name] for name in MEMORY_TERMS] + [reserved - total], axis=1)
    largest = np.argmax(terms, axis=1)
    size = terms[np.arange(len(idx)), largest]
    stage = out["peak_stage"][idx].astype(np.int64)
    rank = stage * out["ranks_per_stage"][idx]
    over = np.maximum(0.0, reserved - capacity)
    cols.text["reasons"][idx] = [
        overflow_text(r, s, a, capacity, o, MEMORY_TERM_NAMES[j], z) for r, s, a, o, j, z in
        zip(rank.tolist(), stage.tolist(), reserved.tolist(), over.tolist(), largest.tolist(), size.tolist(),
            strict=True)]


def _warnings(cols: _Columns, idx, out: dict, model, cluster, parts: dict, local) -> None:
    """``sanity_warnings`` of the feasible points, run only where one of its checks could fire."""
    from simtrain.report.sanity import (
        COMM_BOUND_SHARE,
        DATA_STALL_SHARE,
        MEMORY_FULL_SHARE,
        MFU_MARGIN,
        model_class_of,
        precision_class,
        public_mfu,
        sanity_warnings,
    )
    if not len(idx):
        return
    device, klass = cluster.device, model_class_of(model)
    kind = device.kind

    def limit(setting) -> float:
        hit = public_mfu().best(device.name, kind, klass, precision_class(str(setting.reg.matmul_dtype)))
        return math.inf if hit is None else hit[0].value * (1 + MFU_MARGIN)
    limits = np.array([limit(s) if not isinstance(s, (str, type(None))) else math.inf for s, _ in out["settings"]])
    mfu, hfu, step = out["mfu"][idx], out["hfu"][idx], out["step_time_s"][idx]
    capacity = cluster.device.usable_memory_bytes
    with np.errstate(divide="ignore", invalid="ignore"):
        screen = ((mfu > 1) | (hfu > 1) | (mfu > limits[out["s_inv"][idx]]) | ~(step > 0) | ~np.isfinite(step)
                  | (out["hardware_flops"][idx] < out["model_flops"][idx] * (1 - 1e-9))
                  | (parts["comm_exposed"][local] / step > COMM_BOUND_SHARE * (1 - 1e-9))
                  | (parts["data_stall"][local] / step > DATA_STALL_SHARE * (1 - 1e-9))
                  | (out["memory_reserved_bytes"][idx] / capacity > MEMORY_FULL_SHARE * (1 - 1e-9)))
    for j in np.flatnonzero(screen):
        i = idx[j]
        setting = out["settings"][out["s_inv"][i]][0]
        target = out["layouts"][out["l_inv"][i]][0][0]
        report = SimpleNamespace(
            feasible=True, step_time_s=float(step[j]), mfu=float(mfu[j]), hfu=float(hfu[j]),
            peak_flops_per_s=float(out["peak_flops_per_s"][i]), hardware_flops_per_step=float(out["hardware_flops"][i]),
            model_flops_per_step=float(out["model_flops"][i]), device_name=device.name,
            time_breakdown_s={p: float(v[local[j]]) for p, v in parts.items()}, memory=_memory(out, i, target))
        cols.text["warnings"][i] = "; ".join(sanity_warnings(report, device_kind=kind, model_class=klass,
                                                             matmul_dtype=str(setting.reg.matmul_dtype)))


def _scalar_everywhere(cluster) -> bool:
    """Devices whose rows carry a per-device note the stand-in report does not make (cost/fpga.py, the
    wafer note): every point through ``evaluate_point``."""
    return str(cluster.device.kind) in ("fpga", "wafer")


def auto_table(model, cluster, cfg, keys: list[str], uniques: dict, codes: dict, schema, cache: dict | None = None,
               point_key: list[str] | None = None):
    """The sweep rows (an Arrow table of ``schema``) of the coded points (see module docstring);
    ``cache``: kept between the chunks of one sweep (search/vector.py ``_run``); ``point_key``: the
    points' keys when the caller has them."""
    n = len(codes[keys[0]]) if keys else 0
    cols = _Columns(n)
    if _scalar_everywhere(cluster):
        path = np.full(n, PATHS.index("scalar"))
        out = None
    else:
        out = _run(model, cluster, cfg, codes, uniques, n, frame=False, scalar=False, cache=cache, interleave=False)
        path = out["path"]
    vector = np.flatnonzero(path == PATHS.index("vector"))
    if len(vector):  # a step that is not finite gets the estimate's own row and reason
        finite = np.isfinite(np.stack([out[k][vector] for k in ("step_time_s", *_PARTS.values())])).all(axis=0)
        path = path.copy()
        path[vector[~finite]] = PATHS.index("scalar")
        vector = vector[finite]
    if len(vector):
        _vector_columns(cols, vector, out, model, cluster, out["gbs"][vector])
    evaluate = lambda i: sweep_rows.evaluate_point(model, cluster, cfg, point_at(keys, uniques, codes, i))  # noqa: E731
    if out is not None:
        s_ok = np.array([s is not None for s, _ in out["settings"]])[out["s_inv"]]
        l_ok = np.array([lay is not None for lay, _ in out["layouts"]])[out["l_inv"]]
        # a rejected layout (settings fine) or rejected settings (layout fine): one point stands for all
        for mask, group in (((path == PATHS.index("layout")) & s_ok, out["l_inv"]),
                            ((path == PATHS.index("setting")) & l_ok, out["s_inv"])):
            idx = np.flatnonzero(mask)
            groups, first, which = np.unique(group[idx], return_index=True, return_inverse=True)
            cols.put_rows(idx, [evaluate(int(idx[j])) for j in first], which.reshape(-1))
        rest = np.flatnonzero((path == PATHS.index("scalar")) | ((path != PATHS.index("vector")) & ~s_ok & ~l_ok))
    else:
        rest = np.arange(n)
    cols.put_rows(rest, [evaluate(int(i)) for i in rest], np.arange(len(rest)))
    return _table(keys, uniques, codes, cols, schema, point_key)


def auto_rows(model, cluster, cfg, points: list[dict]) -> list[dict]:
    """The rows of ``points`` (dicts with the same keys, in sweep order) as ``evaluate_chunk`` gives
    them, ``point_key`` included: what a Dask task of the auto engine returns."""
    from simtrain.search.sweep_store import sweep_schema
    keys = sorted(points[0]) if points else []
    uniques, codes = {}, {}
    for k in keys:
        seen: dict = {}  # keyed by (type, value): True stays apart from 1
        codes[k] = np.array([seen.setdefault((type(p[k]), p[k]), len(seen)) for p in points], dtype=np.int32)
        uniques[k] = [v for _, v in seen]
    schema = sweep_schema(uniques, "")
    return auto_table(model, cluster, cfg, keys, uniques, codes, schema).to_pylist() if points else []


def _table(keys, uniques, codes, cols: _Columns, schema, point_key=None):
    import pyarrow as pa

    from simtrain.search.sweep_store import _cell
    arrays = {}
    for k in keys:
        typ = schema.field(k).type
        cells = [_cell(v, typ) for v in uniques[k]]
        if None in cells or pa.types.is_string(typ):
            values = np.empty(len(cells), dtype=object)
            values[:] = cells
        else:
            values = np.array(cells, dtype=typ.to_pandas_dtype())
        arrays[k] = pa.array(values[codes[k]], type=typ)
    for c in RESULT_COLUMNS:
        typ = schema.field(c).type
        if c in cols.num:
            arrays[c] = pa.array(cols.num[c], type=typ)
        elif c in cols.flag:
            arrays[c] = pa.array(cols.flag[c], type=typ)
        elif c == "devices_count":
            arrays[c] = pa.array(cols.devices, type=typ, mask=cols.no_devices)
        else:
            arrays[c] = pa.array(cols.text[c].tolist(), type=typ)
    arrays["point_key"] = pa.array(point_key if point_key is not None else point_keys(keys, uniques, codes),
                                   type=pa.string())
    return pa.table(arrays, schema=schema)
