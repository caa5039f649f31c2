"""Inputs resolved once (issue 38): the stack and the device's efficiency profile are looked up at the
entry of an engine call (simtrain/resolve.py) and read from the resolved record below it.

Two views: the walk of one call (every call to a lookup function counted with a profiler hook, so
``from x import f`` aliases are counted too), and a static scan of the modules below the entry."""

from __future__ import annotations

import ast
import collections
import sys
from pathlib import Path

import pytest

import simtrain as st
from simtrain.cost import compute as compute_mod
from simtrain.specs import stack_resolve as stack_mod

ROOT = Path(__file__).resolve().parents[2]
LOOKUPS = ("stack_of", "resolve_stack", "named_stack", "load_stack", "device_efficiency")


def _walk(fn) -> collections.Counter:
    """(lookup, calling module, calling function) → calls during ``fn()``."""
    codes = {getattr(stack_mod, n).__code__: n for n in ("stack_of", "resolve_stack", "named_stack")}
    codes[compute_mod.device_efficiency.__code__] = "device_efficiency"
    calls: collections.Counter = collections.Counter()

    def hook(frame, event, _arg):
        if event == "call" and frame.f_code in codes:
            caller = frame.f_back.f_code
            calls[(codes[frame.f_code], caller.co_filename.split("simtrain/")[-1], caller.co_name)] += 1
    sys.setprofile(hook)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


@pytest.mark.parametrize("engine", ["estimate", "simulate"])
@pytest.mark.parametrize("hardware, stack", [("dgx-h100", "megatron-core"), ("dgx-a100-80gb", None)])
def test_one_resolution_per_call(engine, hardware, stack):
    """A fresh cluster object (cold caches) and a config naming a stack or none (the GPU default): the
    stack is resolved once, by resolve.py, and the device's profile read once there; the only other
    read is the cluster signature's, once per cluster object, of each node's own device (a heterogeneous
    cluster's other nodes carry other devices)."""
    model = st.load_model("llama3-8b")
    cluster = st.load_cluster(hardware, nodes=2).model_copy()
    cfg = st.TrainConfig(global_batch_size=32, micro_batch_size=1, seq_len=4096, tp=2, pp=2, stack=stack)
    calls = _walk(lambda: getattr(st, engine)(model, cluster, cfg))
    by_lookup = collections.Counter()
    for (name, where, func), n in calls.items():
        by_lookup[name] += n
        allowed = {("resolve.py", "resolve"), ("specs/stack_resolve.py", "resolve_stack"), ("specs/stack_resolve.py", "named_stack")}
        if name == "device_efficiency":
            allowed.add(("parallel/placement.py", "_efficiency_numbers"))
        assert (where, func) in allowed, f"{name} looked up below the entry, in {where}:{func}"
    assert by_lookup["resolve_stack"] == 1 and by_lookup["named_stack"] == 1
    assert by_lookup["stack_of"] <= 1 and 1 <= by_lookup["device_efficiency"] <= 2
    warm = _walk(lambda: getattr(st, engine)(model, cluster, cfg))       # caches warm: the entry's only
    assert sum(n for (name, _, _), n in warm.items() if name == "device_efficiency") == 1


def test_the_vectorized_path_looks_up_only_at_its_entry():
    """st.plan runs the vectorized estimate over many layouts: every lookup happens where a point's
    settings are resolved (resolve.py, per settings combination) or at the plan's own entry, never in
    the factored evaluation or the program below it."""
    model, cluster = st.load_model("llama3-8b"), st.load_cluster("dgx-h100", nodes=4).model_copy()
    calls = _walk(lambda: st.plan(model, cluster, tokens=1e12, global_batch_size=64, seq_len=2048,
                                  stack="megatron-core", max_nodes=4, max_pp=4, top=3))
    assert calls
    for (name, where, func) in calls:
        assert where not in ("search/vector_core.py", "search/vector_rules.py", "parallel/program.py",
                             "parallel/memory_plan.py", "parallel/comm_tasks.py", "parallel/comm.py",
                             "estimator.py"), (name, where, func)


BELOW_THE_ENTRY = ("simtrain/estimator.py", "simtrain/parallel/program.py", "simtrain/parallel/memory_plan.py",
                   "simtrain/parallel/comm_tasks.py", "simtrain/parallel/comm.py", "simtrain/parallel/recompute.py",
                   "simtrain/parallel/schedule.py", "simtrain/parallel/topology.py", "simtrain/search/vector_core.py",
                   "simtrain/search/vector_rules.py", "simtrain/search/vector_pipeline.py", "simtrain/sim/engine.py",
                   "simtrain/sim/recipe.py", "simtrain/sim/links.py", "simtrain/cost/memory.py",
                   "simtrain/cost/op_cost.py", "simtrain/cost/realisation.py")


@pytest.mark.parametrize("path", BELOW_THE_ENTRY)
def test_no_lookup_below_the_entry(path):
    """The engines' inner modules never call a stack or profile lookup: they read ``cfg.stack``, the
    program's ``cfg`` / ``efficiency`` and the coster's ``eff``, all from simtrain/resolve.py."""
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    called = {node.func.id if isinstance(node.func, ast.Name) else node.func.attr
              for node in ast.walk(tree) if isinstance(node, ast.Call)
              and isinstance(node.func, (ast.Name, ast.Attribute))}
    assert not called & set(LOOKUPS), f"{path} calls {sorted(called & set(LOOKUPS))}"
