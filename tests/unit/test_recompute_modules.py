"""Selective recomputation by module (Megatron-Core --recompute-modules), derived from the op records."""

from __future__ import annotations

import pytest

import simtrain as st
from simtrain.cost.memory import saved_bytes
from simtrain.cost.precision import regime
from simtrain.estimator import build_program, estimate


def _tiny_gpt():
    from simtrain.graph.model import build_model
    from simtrain.graph.spec import ModelSpec
    t = {"layers": 2, "hidden": 16, "heads": 4, "vocab": 32, "ffn_hidden": 64, "activation": "gelu",
         "biases": True, "flash_attention": False}
    return build_model(ModelSpec.model_validate({"name": "tiny-gpt", "family": "transformer", "seq_len": 8,
                                                 "transformer": t}))


@pytest.fixture(scope="module")
def setup():
    return _tiny_gpt(), st.Cluster.single(st.load_device("h100-sxm5-80gb"))


def _cfg(**kw):
    return st.TrainConfig(global_batch_size=2, micro_batch_size=2, precision="bf16", **kw)


def _ops(model):
    return {op.name: op for op in model.ops}


def _saved(model, *names):
    ops, reg = _ops(model), regime("bf16")
    return sum(saved_bytes(ops[f"layers.{i}/{n}"], 2, reg) for i in range(2) for n in names)


def _run(model, cluster, **kw):
    r = estimate(model, cluster, _cfg(**kw))
    prog = build_program(model, cluster, _cfg(**kw))
    return r.memory.activations_bytes, prog.stages[0].recompute_s


def test_default_selective_is_the_attention_core(setup):
    model, cluster = setup
    assert _run(model, cluster, recompute="selective") == _run(model, cluster, recompute="selective",
                                                              recompute_modules=["core_attn"])


def test_mlp_module_keeps_only_the_mlp_input(setup):
    model, cluster = setup
    none_act, _ = _run(model, cluster, recompute="none")
    act, rc = _run(model, cluster, recompute="selective", recompute_modules=["mlp"])
    # fc1 keeps its input (the run's input); act and fc2 drop what they save; mlp/add is no matmul
    assert act == pytest.approx(none_act - _saved(model, "mlp/act", "mlp/fc2"))
    prog = build_program(model, cluster, _cfg(recompute="selective", recompute_modules=["mlp"]))
    ops = {name.split("/", 1)[1]: t for name, _, t, _ in prog.stages[0].op_times if "/" in name}
    assert rc > 0 and "mlp/fc1" in ops


def test_layernorm_module_drops_the_saved_inputs_of_the_next_matmuls(setup):
    model, cluster = setup
    none_act, _ = _run(model, cluster, recompute="none")
    act, rc = _run(model, cluster, recompute="selective", recompute_modules=["layernorm"])
    assert act == pytest.approx(none_act - _saved(model, "attn/qkv", "mlp/fc1"))
    assert rc > 0


def test_patterns_and_bad_names():
    assert _cfg(recompute="selective", recompute_modules=["mlp/act", "attn/*"]).recompute_modules
    with pytest.raises(Exception, match="neither a module"):
        _cfg(recompute="selective", recompute_modules=["attention"])
    with pytest.raises(Exception, match="needs recompute='selective'"):
        _cfg(recompute="full", recompute_modules=["mlp"])


def test_more_recomputation_never_needs_more_memory_and_costs_more_time(setup):
    model, cluster = setup
    a1, t1 = _run(model, cluster, recompute="selective", recompute_modules=["core_attn"])
    a2, t2 = _run(model, cluster, recompute="selective", recompute_modules=["core_attn", "mlp", "layernorm"])
    assert a2 < a1 and t2 > t1


# --- full recomputation of the first N layers (Megatron --recompute-method block) ----------------
def test_recompute_num_layers_spans_none_to_full(setup):
    model, cluster = setup
    none = estimate(model, cluster, _cfg(recompute="none"))
    full = estimate(model, cluster, _cfg(recompute="full"))
    zero = estimate(model, cluster, _cfg(recompute="full", recompute_num_layers=0))
    every = estimate(model, cluster, _cfg(recompute="full", recompute_num_layers=2))
    # N = 0: every layer keeps everything (blocks outside the layers are held as under full)
    assert full.memory.activations_bytes < zero.memory.activations_bytes <= none.memory.activations_bytes
    assert zero.time_breakdown_s["recompute"] == 0
    assert every.memory.activations_bytes == pytest.approx(full.memory.activations_bytes)
    assert every.time_breakdown_s["recompute"] == pytest.approx(full.time_breakdown_s["recompute"])


def test_recompute_one_of_two_layers_is_halfway(setup):
    model, cluster = setup
    none = estimate(model, cluster, _cfg(recompute="none"))
    full = estimate(model, cluster, _cfg(recompute="full"))
    one = estimate(model, cluster, _cfg(recompute="full", recompute_num_layers=1))
    # two identical layers: one keeps everything, one keeps its input; recompute time halves
    per_layer_none = (none.memory.activations_bytes - _saved_outside_layers(model)) / 2
    assert one.time_breakdown_s["recompute"] == pytest.approx(full.time_breakdown_s["recompute"] / 2)
    assert full.memory.activations_bytes < one.memory.activations_bytes < none.memory.activations_bytes
    assert one.memory.activations_bytes >= per_layer_none
    assert one.hardware_flops_per_step < full.hardware_flops_per_step


def _saved_outside_layers(model):
    reg = regime("bf16")
    return sum(saved_bytes(op, 2, reg) for op in model.ops if not op.name.startswith("layers."))


def test_recompute_num_layers_needs_full():
    with pytest.raises(Exception, match="needs recompute='full'"):
        _cfg(recompute="selective", recompute_num_layers=1)
