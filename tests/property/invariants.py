"""The invariants of issue 11, as functions over one random case (tests/property/strategies.py):
each returns a list of violations (empty = holds), so the hypothesis tests assert on it and the
benchmark counts it.

(a) more FLOP/s, memory bandwidth or link bandwidth never slows a step;
(b) per-rank allocated memory with ZeRO-3 ≤ ZeRO-2 ≤ ZeRO-1 ≤ ZeRO-0 (dp ≥ 2, ≥ 4 layers);
(c) MFU ≤ 1 and HFU ≤ 1;
(d) estimate == simulate when nothing contends;
(e) reruns are bit-identical.
"""

from __future__ import annotations

import json
import math

import simtrain as st
from tests.property.strategies import Case, scaled_flops, scaled_links, scaled_memory_bandwidth

__all__ = ["SCALERS", "check_faster", "check_zero_memory", "check_utilisation", "check_agreement",
           "check_rerun", "zero_applies", "fsdp_frees_more_than_it_gathers", "MONOTONE_REL", "AGREE_REL"]

MONOTONE_REL = 1e-9
AGREE_REL = 1e-6
SCALERS = {"flops": scaled_flops, "memory_bandwidth": scaled_memory_bandwidth, "link_bandwidth": scaled_links}


def _step(case: Case, cluster=None, engine=st.estimate, **fields) -> float:
    cfg = case.with_fields(**fields).cfg if fields else case.cfg
    return engine(case.model, cluster or case.cluster, cfg).step_time_s


def check_faster(case: Case, which: str, k: float = 1.1, engine=st.estimate) -> list[str]:
    """(a) ``which`` ∈ SCALERS × ``k`` (> 1) never makes ``step_time_s`` larger."""
    base = _step(case, engine=engine)
    if not math.isfinite(base):
        return []
    fast = _step(case, SCALERS[which](case.cluster, k), engine=engine)
    if fast > base * (1 + MONOTONE_REL):
        return [f"{which} x{k:g}: step {base:.9g} s -> {fast:.9g} s (+{(fast / base - 1) * 100:.4g}%)"]
    return []


def zero_applies(case: Case) -> bool:
    return case.fields.get("dp", 1) >= 2 and case.layers >= 4


def fsdp_frees_more_than_it_gathers(case: Case) -> bool:
    """ZeRO-3's premise, from the block sizes alone: on every pipeline stage, 1 + prefetch units of
    the largest size fit in what sharding frees, (1 − 1/N_d) of the stage's weights. With L equal
    layers, prefetch 1 and dp = 2 that is L ≥ 4 (the issue's "≥ 4 layers"); a stage made of few
    units, or an embedding larger than the layers, breaks it, and then ZeRO-3 really holds more:
    FSDP gathers each unit whole (``gathered_params_bytes``)."""
    from simtrain.cost.memory import zero_degree
    from simtrain.cost.op_cost import shard_factors
    from simtrain.errors import SimtrainError, SpecError
    from simtrain.estimator import build_program, prepare_model
    from simtrain.parallel.model_index import model_index
    from simtrain.specs.stack_resolve import resolve_stack, stack_of
    cfg = resolve_stack(case.with_fields(zero_stage=3).cfg)
    try:
        model = prepare_model(case.model, cfg)
        program = build_program(model, case.cluster, cfg)
    except (SpecError, SimtrainError):
        return False
    if isinstance(program, list):
        return False
    lay, idx, k = program.layout, model_index(model), stack_of(cfg).fsdp_prefetch_layers
    n_d = {False: zero_degree(lay.dp, lay.cp), True: zero_degree(lay.dp, lay.cp, lay.ep, expert=True)}
    for stage in program.stages:
        units, freed = [], 0.0
        for b in stage.blocks:
            size = 0.0
            for rep, n in idx.block_items[b]:
                op = idx.reps[rep]
                w = op.param_count * shard_factors(op, lay.tp, cfg.sequence_parallel, lay.ep).weights * n
                expert = op.tp_split == "expert"
                freed += w * (1 - 1 / n_d[expert])
                size += w if n_d[expert] > 1 else 0.0
            units.append(size)
        if (1 + k) * max(units) > freed:
            return False
    return True


def check_zero_memory(case: Case) -> list[str]:
    """(b) allocated per-rank memory (peak rank) never grows with the ZeRO stage; ZeRO-3 against
    ZeRO-2 where FSDP frees more than it gathers (:func:`fsdp_frees_more_than_it_gathers`)."""
    if not zero_applies(case):
        return []
    totals = []
    for z in range(4):
        r = st.estimate(case.model, case.cluster, case.with_fields(zero_stage=z).cfg)
        if r.memory is None:
            return []
        totals.append(r.memory.total_bytes)
    pairs = range(3) if fsdp_frees_more_than_it_gathers(case) else range(2)
    return [f"ZeRO-{z + 1} {totals[z + 1]:.6g} B > ZeRO-{z} {totals[z]:.6g} B"
            for z in pairs if totals[z + 1] > totals[z] * (1 + MONOTONE_REL)]


def check_utilisation(case: Case, engine=st.estimate) -> list[str]:
    """(c) MFU ≤ 1 and HFU ≤ 1."""
    r = engine(case.model, case.cluster, case.cfg)
    if not math.isfinite(r.step_time_s):
        return []
    return [f"{name} = {u:.6g} > 1" for name, u in (("mfu", r.mfu), ("hfu", r.hfu)) if u > 1 + 1e-12]


def check_agreement(case: Case) -> list[str]:
    """(d) estimate == simulate (≤ 1e-6 relative on step_time_s). The simulator runs the schedule the
    estimate evaluates and models no contention beyond it (a pipeline send is the tail of its
    sender's task; nothing else queues), so nothing ever contends: every case is checked."""
    e = st.estimate(case.model, case.cluster, case.cfg)
    s = st.simulate(case.model, case.cluster, case.cfg)
    if not (math.isfinite(e.step_time_s) and math.isfinite(s.step_time_s)):
        return [] if math.isfinite(e.step_time_s) == math.isfinite(s.step_time_s) else ["one engine has no step time"]
    if abs(s.step_time_s - e.step_time_s) > AGREE_REL * e.step_time_s:
        return [f"estimate {e.step_time_s:.9g} s, simulate {s.step_time_s:.9g} s "
                f"({(s.step_time_s / e.step_time_s - 1) * 100:+.4g}%)"]
    return []


def _canonical(report) -> str:
    return json.dumps(report.to_dict(), sort_keys=True, default=repr)


def check_rerun(case: Case, engine=st.estimate, between=None) -> list[str]:
    """(e) the same inputs give the identical report (``between``: work run between the two, which
    warms and perturbs the library's memos)."""
    first = _canonical(engine(case.model, case.cluster, case.cfg))
    if between is not None:
        between()
    second = _canonical(engine(case.model, case.cluster, case.cfg))
    return [] if first == second else [f"{engine.__name__} rerun differs"]
