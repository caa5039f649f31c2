"""The vectorized estimate of one group of configurations that share a pipeline structure.

A group is every configuration with the same cluster size, pipeline degree p, virtual stages v,
schedule and model build: they share the partition of the model into stages and the schedule's task
graph. Inside a group the step time is factored into pieces that each depend on a few axes:

* per block kind — compute seconds, FLOPs and kernels of one micro-batch: ``program.stage_compute``
  (op costs) on (micro-batch, cp, tp, SP, ep, compute settings);
* per stage shape — the stage's own collectives (tp / cp / ep / pp): ``comm_tasks.microbatch_comm``
  on (micro-batch, tp, cp, ep, dp, SP, compute settings); its data-parallel side (parameter memory,
  optimizer step, gradient sync and ZeRO gathers: ``stage_state.stage_param_memory``, ``stage_optimizer_seconds``,
  ``comm_tasks.step_comm`` / ``fsdp_comm.fsdp_gathers``) on (tp, ep, dp, cp, SP, accumulating, dp settings); its
  activations (``memory_plan._activations_and_working``) on (micro-batch, cp, tp, ep, SP, recompute).

Each piece is computed by those scalar rules once per distinct sub-key (the first configuration
holding it stands for all) and gathered back by index; the windows that mix pieces (host dispatch,
overlap, bucketed sync, the pipeline recurrence, memory totals) run as numpy over the group
(search/vector_rules.py, search/vector_pipeline.py).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

import simtrain.search.vector_rules as rules
from simtrain.cost.realisation import hidden_cost_s, hosts_of, slow_host_shares
from simtrain.parallel.comm import ClusterComm
from simtrain.parallel.comm_tasks import _exposed, microbatch_comm, step_comm
from simtrain.parallel.fsdp_comm import (
    fsdp_copy_out_s,
    fsdp_layer_gathers,
    fsdp_reduce_copy_in_s,
    fsdp_root_gather,
    grad_sync_units,
    zero3_sharded,
)
from simtrain.parallel.fsdp_units import fsdp_units
from simtrain.parallel.layout import Layout
from simtrain.parallel.memory_plan import _activations_and_working, gathered_params_bytes
from simtrain.parallel.model_index import model_index
from simtrain.parallel.partition import partition_blocks
from simtrain.parallel.program import _last_op, _OpCoster, stage_compute
from simtrain.parallel.schedule import in_flight_microbatches, stage_chunks
from simtrain.parallel.schedule_orders import ChunkWindows, chunk_windows
from simtrain.parallel.stage_state import stage_optimizer_seconds, stage_param_memory
from simtrain.report.step_report import MEMORY_TERM_NAMES, reserved_bytes_of
from simtrain.search.vector_pipeline import pipeline_finish_many

__all__ = ["evaluate_group", "factor"]

_COMPUTE = ("fw", "bw", "rc", "fwf", "bwf", "rcf", "mem", "fwk", "bwk", "rck")


def factor(cols: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(code of each row, first row of each code) over the combination of ``cols``."""
    key = np.zeros(len(cols[0]), dtype=np.int64)
    for c in cols:
        _, inv = np.unique(c, return_inverse=True)
        key = key * (int(inv.max(initial=0)) + 1) + inv
        if key.max(initial=0) > 2**40:  # keep the mixed-radix code small
            _, key = np.unique(key, return_inverse=True)
    _, first, inv = np.unique(key, return_index=True, return_inverse=True)
    return inv.reshape(-1), first


class _Group:
    """Points of one (cluster, p, v, schedule, model) group: ``c`` holds their columns."""

    def __init__(self, cluster, p: int, v: int, schedule, model, settings, c: dict, memo: dict) -> None:
        self.cluster, self.p, self.v, self.schedule, self.model = cluster, p, v, schedule, model
        self.settings, self.c, self.memo, self.comms = settings, c, memo, {}
        self.idx = model_index(model)
        self.m = c["gbs"] // (c["dp"] * c["mb"])

    def ctx(self, i: int):
        """(cfg, layout, comm, coster, setting) of point ``i``, as ``build_program`` would make them."""
        c, s = self.c, self.settings[int(self.c["S"][i])]
        dp, tp, cp, ep, mb = (int(c[k][i]) for k in ("dp", "tp", "cp", "ep", "mb"))
        sp = bool(c["sp"][i])
        lay = Layout(dp, tp, self.p, cp, ep, self.v, int(self.m[i]), mb)
        cfg = s.cfg.model_copy(update=dict(dp=dp, tp=tp, pp=self.p, cp=cp, ep=ep, micro_batch_size=mb,
                                           virtual_stages=self.v, pipeline_schedule=self.schedule,
                                           sequence_parallel=sp, global_batch_size=int(c["gbs"][i])))
        key = (dp, tp, cp, ep, sp)
        comm = self.comms.get(key)
        if comm is None:
            comm = self.comms[key] = ClusterComm(self.cluster, lay, cfg, s.eff)
        coster = _OpCoster(self.cluster, s.reg, lay, sp, self.model, cfg.moe_load_imbalance, cfg.stack, s.eff)
        return cfg, lay, comm, coster, s

    def piece(self, name: str, cols: list[str], fn, extra=()) -> dict[str, np.ndarray]:
        """Evaluate ``fn(i) -> dict`` once per distinct combination of ``cols`` (memoised across
        groups under ``name`` + ``extra`` + the values) and gather the results to every point."""
        inv, first = factor([self.c[k] for k in cols])
        rows = []
        values = np.stack([self.c[k][first].astype(np.int64) for k in cols], axis=1).tolist()  # bools as 0/1
        for i, vals in zip(first.tolist(), values, strict=True):
            key = (name, *extra, *vals)
            out = self.memo.get(key)
            if out is None:
                out = self.memo[key] = fn(i)
            rows.append(out)
        return {k: np.array([r[k] for r in rows])[inv] for k in rows[0]}


def _block_compute(g: _Group, block: str) -> dict:
    def fn(i):
        cfg, _, _, coster, _ = g.ctx(i)
        out = stage_compute(g.idx.items((block,)), cfg, coster)
        return dict(zip(_COMPUTE, out[:10], strict=True))
    kind = g.idx.shape_key((block,))
    return g.piece("block", ["mb", "cp", "tp", "sp", "ep", "sig_c"], fn, (id(g.model), kind))


def _local_comm(g: _Group, stage: int, blocks) -> dict:
    def fn(i):
        cfg, lay, comm, coster, s = g.ctx(i)
        items = g.idx.items(blocks)
        local = microbatch_comm(items, cfg, lay, s.reg, comm, coster, stage, _last_op(g.model, blocks))
        return {"e_fw": _exposed(local, ("fw",)), "e_back": _exposed(local, ("bw", "recompute")),
                "e_bw": _exposed(local, ("bw",)), "e_rc": _exposed(local, ("recompute",)),
                "hid": hidden_cost_s(local)}
    # the schedule decides whether the stack's pipeline sends are hidden (comm_tasks._pp_tasks)
    return g.piece("local", ["mb", "cp", "tp", "sp", "ep", "dp", "sig_l"], fn,
                   (id(g.model), id(g.cluster), g.p, g.v, str(g.schedule), blocks))


def _dp_side(g: _Group, blocks) -> dict:
    def fn(i):
        cfg, lay, comm, coster, s = g.ctx(i)
        items = g.idx.items(blocks)
        pm = stage_param_memory(g.model, blocks, items, cfg, lay, s.reg)
        out = {"params": pm.params_bytes, "grads": pm.grads_bytes, "optim": pm.optimizer_bytes,
               "opt_s": stage_optimizer_seconds(pm.trainable_count, items, cfg, lay, s.reg, coster),
               "grad_s": 0.0, "grad_buckets": 1, "ag_s": 0.0, "sync": False, "grad_root_s": 0.0,
               "fsdp": False, "g_s": 0.0, "layers": 1, "g_root_s": 0.0, "gathered": 0.0, "grad_bytes": 0.0,
               "ag_bytes": 0.0}
        units = fsdp_units(g.model, blocks, cfg, lay)
        tasks = step_comm(pm, cfg, lay, s.reg, comm, 0.0, 0.0, units=units)  # which collectives, their seconds
        bucket = out["bucket"] = grad_sync_units(pm, cfg, s.reg, units)[1]
        for t in (t for t in tasks if not t.phase.startswith("accum")):  # the accumulated ones: _stage_time
            if t.phase == "step-root":  # the root unit's reduction, exposed after the backward's last op
                out["grad_root_s"] = t.seconds
                continue
            name = "grad" if t.kind != "allgather" else "ag"
            out.update({f"{name}_s": t.seconds, f"{name}_bytes": t.bytes, "sync": True})
            if name == "grad":  # the accumulated reductions' buckets (the step's own are per chunk share)
                out["grad_buckets"] = max(1, math.ceil(t.bytes / bucket))
        if zero3_sharded(pm, cfg, lay):
            layer = fsdp_layer_gathers(pm, cfg, s.reg, comm, 0.0, 0.0, units)
            root = fsdp_root_gather(pm, cfg, s.reg, comm, units)
            out.update(fsdp=True, g_s=layer[0].seconds if layer else 0.0, layers=units.layers,
                       g_root_s=root.seconds if root is not None else 0.0)
        out["copy_fw"], out["copy_bw"] = fsdp_copy_out_s(pm, cfg, lay, s.reg, coster, units)
        out["copy_in"] = fsdp_reduce_copy_in_s(pm, cfg, lay, s.reg, coster, units)
        if cfg.zero_stage >= 3:
            out["gathered"] = gathered_params_bytes(SimpleNamespace(blocks=blocks), g.model, cfg, lay, s.reg,
                                                    cfg.stack.fsdp_prefetch_layers)
        return out
    g.c["accum"] = g.m > 1
    return g.piece("dp", ["tp", "ep", "dp", "cp", "sp", "accum", "sig_d"], fn,
                   (id(g.model), id(g.cluster), g.p, blocks))


def _activations(g: _Group, blocks) -> dict:
    def fn(i):
        cfg, lay, _, _, s = g.ctx(i)
        per_mb, working = _activations_and_working(SimpleNamespace(blocks=blocks), g.model, cfg, lay, s.reg)
        return {"per_mb": per_mb, "working": working}
    return g.piece("act", ["mb", "cp", "tp", "ep", "sp", "sig_a"], fn, (id(g.model), blocks))


def _stage_compute(g: _Group, blocks, cache: dict) -> dict:
    """Σ over the stage's blocks of (count × per-block compute): the stage's ``stage_compute`` sums."""
    counts: dict = {}
    for b in blocks:
        kind = g.idx.shape_key((b,))
        counts.setdefault(kind, [b, 0])[1] += 1
    total = None
    for kind, (b, n) in counts.items():
        if kind not in cache:
            cache[kind] = _block_compute(g, b)
        part = {k: n * x for k, x in cache[kind].items()}
        total = part if total is None else {k: total[k] + part[k] for k in total}
    return total


def _windows(g: _Group, stage: int) -> ChunkWindows:
    """``program._windows`` per configuration: the chunk windows' work counts as arrays over the
    group's points (they depend on the micro-batch count through the schedule's order)."""
    ms, inv = np.unique(g.m, return_inverse=True)
    per = [chunk_windows(stage, g.p, int(m), g.schedule, g.v) for m in ms]
    # (unique m, chunk, fw / bw) and (unique m, chunk, launch / need, fw / bw), spread over the points
    grad = np.array([w.grad_after for w in per], dtype=float).reshape(len(per), -1, 2)[inv]
    gather = np.array([w.gather for w in per], dtype=float).reshape(len(per), -1, 2, 2)[inv]
    grad = tuple((grad[:, k, 0], grad[:, k, 1]) for k in range(grad.shape[1]))
    gather = tuple(tuple((gather[:, k, e, 0], gather[:, k, e, 1]) for e in (0, 1)) for k in range(gather.shape[1]))
    return ChunkWindows(grad, gather)


def _stage_time(g: _Group, stage: int, blocks, cache: dict, k: dict) -> dict:
    """One stage's per-micro-batch forward / backward seconds, its syncs and optimizer step
    (``program._stage_program`` and the StageProgram properties, over every point of the group)."""
    comp, loc, d = _stage_compute(g, blocks, cache), _local_comm(g, stage, blocks), _dp_side(g, blocks)
    # FSDP2's copy-out runs on the compute stream: part of each phase's compute (program._stage_program)
    comp = {**comp, "fw": comp["fw"] + d["copy_fw"], "bw": comp["bw"] + d["copy_bw"],
            "mem": comp["mem"] + d["copy_fw"] + d["copy_bw"]}
    # FSDP2's gradient copy-in in each backward that reduces (fsdp_comm.reduce_copy_in_share)
    copy_in = d["copy_in"] * np.where(k["every_mb"] & (g.p == 1), 1.0, 1.0 / g.m)
    comp = {**comp, "bw": comp["bw"] + copy_in, "mem": comp["mem"] + copy_in}
    fw_d, bw_d = comp["fw"] + loc["e_fw"], (comp["bw"] + comp["rc"]) + loc["e_back"]
    fsdp, gs, layers = d["fsdp"], d["g_s"], d["layers"]
    total = gs * layers  # ZeRO-3 / FSDP per-layer gathers: fsdp_comm.fsdp_layer_gathers
    per = np.maximum(layers, 1)  # a stage that is all root unit has no layer gathers (gs = 0)
    over_fw = gs * layers - rules.prefetched_exposed_s(gs, fw_d / per, layers, k["prefetch"])
    over_bw = gs * layers - rules.prefetched_exposed_s(gs, bw_d / per, layers, k["prefetch"])
    e_gfw, e_gbw = rules.exposed_s(total, over_fw, k["slow"]), rules.exposed_s(total, over_bw, k["slow"])
    # their hidden part costs the compute beside it (realisation.interference_s)
    hid_g = k["slow"] * np.minimum(total, over_fw) + k["slow"] * np.minimum(total, over_bw)
    # a root unit's gather (fsdp_comm.fsdp_root_gather) waited for at the start of each forward
    exp_fw = np.where(fsdp, loc["e_fw"] + e_gfw + d["g_root_s"], loc["e_fw"])
    exp_bw = np.where(fsdp, loc["e_back"] + e_gbw, loc["e_back"])
    e_bw_phase = np.where(fsdp, loc["e_bw"] + e_gbw, loc["e_bw"])
    gathers = np.where(fsdp, total, 0.0)
    hd, waits = k["host_dispatch_s"], k["waits"]
    fw = rules.host_bound_s(comp["fw"], comp["fwk"], hd, waits, exp_fw)
    bw = np.where(waits, rules.host_bound_s(comp["bw"], comp["bwk"], hd, True),
                  rules.host_bound_s(comp["bw"], comp["bwk"] + comp["rck"], hd, False, comp["rc"] + exp_bw))
    rc = np.where(waits, rules.host_bound_s(comp["rc"], comp["rck"], hd, True), comp["rc"])
    before, after, hid_step = rules.step_sync_s(d, (fw + exp_fw) / g.v, (bw + rc + exp_bw) / g.v, gathers / g.v,
                                                k["zero"], k["dp_overlap"], k["slow"], _windows(g, stage))
    every = k["every_mb"] & (g.p == 1)  # pipelined: the schedule syncs on the last backward only
    extra_after, extra_hid = rules.accumulated_sync_s(d, g.m, (bw + rc + exp_bw) - gathers, every, k["dp_overlap"],
                                                      k["slow"])
    after, hid_step = after + extra_after, hid_step + extra_hid
    forward, backward = fw + exp_fw, bw + rc + e_bw_phase + loc["e_rc"]
    return {"fw": fw, "bw": bw, "rc": rc, "rcf": comp["rcf"], "mem": comp["mem"], "forward": forward,
            "backward": backward, "before": np.where(d["sync"], before, 0.0),
            "after": np.where(d["sync"], after, 0.0), "opt_s": d["opt_s"], "d": d,
            "exposed_mb": exp_fw + exp_bw, "hidden_mb": loc["hid"] + np.where(fsdp, hid_g, 0.0),
            "hidden_step": np.where(d["sync"], hid_step, 0.0)}


def _stage_memory(g: _Group, stage: int, t: dict, k: dict) -> dict:
    """The stage's ranks' memory terms, allocated ``total`` and ``reserved`` bytes
    (``memory_plan.stage_memory``); ``t``: the pieces of the stage's shape (stages with the same ops
    share them, as ``stage_memories`` does)."""
    act, d = t["act"], t["d"]
    ms, inv = np.unique(g.m, return_inverse=True)
    in_flight = np.array([in_flight_microbatches(stage, g.p, int(m), g.schedule, g.v) for m in ms])[inv.reshape(-1)]
    buffers = np.where(k["zero"] >= 3, act["working"] + d["gathered"], act["working"])
    activations = act["per_mb"] * in_flight
    state, transient = d["params"] + d["grads"] + d["optim"], activations + buffers + k["overhead"]
    return {"params": d["params"], "grads": d["grads"], "optimizer": d["optim"], "activations": activations,
            "buffers": buffers, "overhead": k["overhead"], "total": state + transient,
            "reserved": reserved_bytes_of(state, transient, k["reserve"], k["workspace"])}


def evaluate_group(cluster, p: int, v: int, schedule, model, settings, c: dict, memo: dict) -> dict:
    """Step time, memory, MFU/HFU and the last rank's breakdown for the group's points (arrays)."""
    g = _Group(cluster, p, v, schedule, model, settings, c, memo)
    k = {name: np.array([getattr(s, name) for s in settings])[c["S"]] for name in settings[0].knobs}
    chunks = partition_blocks(model, p * v)
    stages = [tuple(b for ch in stage_chunks(s, p, v, schedule) for b in chunks[ch]) for s in range(p)]
    shapes, cache = {}, {}
    for s, blocks in enumerate(stages):  # stages with the same ops cost the same (estimator.build_program)
        key = g.idx.shape_key(blocks)
        if key not in shapes:
            shapes[key] = _stage_time(g, s, blocks, cache, k)
            shapes[key]["act"] = _activations(g, blocks)
    per = [shapes[g.idx.shape_key(b)] for b in stages]
    col = lambda name: np.stack([t[name] for t in per], axis=1)  # noqa: E731  (n, p)
    fw_task, bw_task, before = col("forward") / v, col("backward") / v, col("before")
    finish = np.empty_like(fw_task)
    ms, inv = np.unique(g.m, return_inverse=True)
    for j, m in enumerate(ms):
        rows = np.flatnonzero(inv.reshape(-1) == j)
        finish[rows] = pipeline_finish_many(fw_task[rows], bw_task[rows], int(m), schedule, v, before[rows])
    # the stack's idle gaps and slow hosts stretch each rank's span (cost/realisation.py realisation_lines),
    # added last in the estimator's order (span, sync after, optimizer, idle + stragglers) so both paths
    # round alike
    hosts = hosts_of(c["dp"] * c["tp"] * p * c["cp"], g.cluster.node.devices_count)
    slow_share = slow_host_shares(k["slow_host_fraction"], k["slow_host_step_loss"], hosts)
    ends = finish + col("after") + col("opt_s") + (k["idle"][:, None] * finish + slow_share[:, None] * finish)
    last = np.argmax(ends, axis=1)
    pick = lambda a: a[np.arange(len(last)), last]  # noqa: E731
    step = pick(ends)
    return _results(g, per, k, step, last, pick, finish, slow_share)


#: the peak rank's memory terms (``MemoryReport`` fields without ``_bytes``), gathered per point
MEMORY_TERMS = MEMORY_TERM_NAMES[:6]  # "reserve" is reserved − allocated


def _results(g: _Group, per, k, step, last, pick, finish, slow_share) -> dict:
    c, m = g.c, g.m
    mems = [_stage_memory(g, s, t, k) for s, t in enumerate(per)]
    best = np.zeros(len(step), dtype=np.int64)
    tot, res = mems[0]["total"].copy(), mems[0]["reserved"].copy()
    for s, mem in enumerate(mems[1:], start=1):  # max by (reserved, allocated), first wins ties
        t_s, r_s = mem["total"], mem["reserved"]
        better = (r_s > res) | ((r_s == res) & (t_s > tot))
        best, tot, res = np.where(better, s, best), np.where(better, t_s, tot), np.where(better, r_s, res)
    rows = np.arange(len(step))
    terms = {f"mem_{t}": np.stack([np.broadcast_to(mem[t], step.shape) for mem in mems], axis=1)[rows, best]
             for t in MEMORY_TERMS}
    devices = g.cluster.devices_count
    model_flops = k["flops_per_sample"] * c["gbs"]
    rec = 0
    for t in per:
        rec = rec + t["rcf"]
    hw_flops = model_flops + rec * m * (c["dp"] * c["tp"] * c["cp"])
    peak = k["peak_flops_per_s"]
    mfu = model_flops / (step * devices) / peak
    col = lambda name: np.stack([t[name] for t in per], axis=1)  # noqa: E731
    micro = pick(col("forward")) + pick(col("backward"))
    fw, bw = pick(col("fw")), pick(col("bw"))
    before, after = pick(col("before")), pick(col("after"))
    # estimator._breakdown: the critical rank's exposed collectives less what their hidden part costs
    interference = m * pick(col("hidden_mb")) + pick(col("hidden_step"))
    return {"step_time_s": step, "mfu": mfu, "hfu": hw_flops / (step * devices * peak),
            "memory_bytes": tot, "memory_reserved_bytes": res,
            # estimator.compose: a step that is not finite and positive is never feasible
            "feasible": (res <= g.cluster.device.usable_memory_bytes) & np.isfinite(step) & (step > 0),
            "peak_stage": best, "micro_batches": m, "compute_s": m * (fw + bw),
            "recompute_s": m * pick(col("rc")), "optimizer_s": pick(col("opt_s")),
            "bubble_s": np.maximum(0.0, pick(finish) - (before + m * micro)),
            "comm_exposed_s": m * pick(col("exposed_mb")) + before + after - interference,
            "interference_s": interference, "idle_gaps_s": k["idle"] * pick(finish),
            "stragglers_s": slow_share * pick(finish),
            "memory_bound_share": pick(col("mem")) / np.maximum(fw + bw, 1e-30),
            "model_flops": model_flops, "hardware_flops": hw_flops, "peak_flops_per_s": peak, **terms}
