"""FSDP's root unit (``Stack.fsdp_root_unit``, parallel/fsdp_units.py) and FSDP2's gradient copy-in
(``Stack.fsdp_reduce_copy_in``), hand-derived on a tiny Llama with a large untied vocabulary: 2 layers, s = 8, h = 16, 4 heads of 4 (2 KV heads), SwiGLU f = 32, V = 256.

Parameters: each block 2,336 (norms 2·16, qkv 16·32, proj 16·16, fc1 16·64, fc2 32·16); the root 8,208
(embedding 256·16 = 4,096, final norm 16, LM head 16·256 = 4,096); ψ = 12,880. Two FSDP ranks in bf16:
a gather carries 2 B a parameter, fsdp2 reduces in fp32 (4 B)."""

from __future__ import annotations

import pytest

import simtrain as st
from simtrain.cost.compute import device_efficiency, memory_seconds
from simtrain.cost.precision import regime
from simtrain.estimator import build_program
from simtrain.parallel.fsdp_comm import fsdp_copy_out_s
from simtrain.parallel.fsdp_units import FsdpUnits, fsdp_units
from simtrain.parallel.layout import Layout
from simtrain.parallel.memory_plan import gathered_params_bytes
from simtrain.parallel.model_index import model_index
from simtrain.specs.stack import load_stack
from tests.conftest import invented_cluster

ROOT, LAYER, PSI = 8208, 2336, 12880
LAY = Layout(dp=2, tp=1, pp=1, cp=1, ep=1, v=1, micro_batches=1, micro_batch=2)


def _model():
    from simtrain.graph.model import build_model
    from simtrain.graph.spec import ModelSpec
    t = {"layers": 2, "hidden": 16, "heads": 4, "kv_heads": 2, "vocab": 256, "ffn_hidden": 32, "activation": "swiglu",
         "norm": "rmsnorm", "position": "rotary", "biases": False, "flash_attention": True, "tied_embeddings": False}
    return build_model(ModelSpec.model_validate({"name": "tiny-llama-v256", "family": "transformer", "seq_len": 8,
                                                 "transformer": t}))


def _cfg(root: bool = True, **kw):
    stack = load_stack("fsdp2").with_overrides(host_dispatch_s=0.0, fsdp_root_unit=root)
    base = dict(global_batch_size=4, micro_batch_size=2, precision="bf16", optimizer="adamw", dp=2, stack=stack)
    return st.TrainConfig(**{**base, **kw})


def _program(root: bool = True, **kw):
    return build_program(_model(), invented_cluster(2), _cfg(root, **kw))


def test_the_root_holds_what_no_block_holds():
    model = _model()
    blocks = tuple(model_index(model).block_items)
    assert blocks == ("embed", "layers.0", "layers.1", "head")
    prog = _program()
    assert prog.stages[0].params.params_count == PSI
    assert fsdp_units(model, blocks, prog.cfg, LAY) == FsdpUnits(2, ROOT / PSI)
    # every block one unit without the root, and below ZeRO-3 (the presets that set it: FSDP's)
    assert fsdp_units(model, blocks, _program(root=False).cfg, LAY) == FsdpUnits(4)
    assert fsdp_units(model, blocks, _program(zero_stage=1).cfg, LAY) == FsdpUnits(4)
    assert all(load_stack(s).fsdp_root_unit for s in ("fsdp2", "fsdp2-compile", "llm-foundry"))
    assert not any(load_stack(s).fsdp_root_unit for s in ("deepspeed", "maxtext", "reference"))


def test_the_root_is_gathered_once_a_forward_and_reduced_after_the_backward_both_exposed():
    stage = _program().stages[0]
    gathers = [t for t in stage.comm if t.axis == "dp" and t.kind == "allgather"]
    root = [t for t in gathers if t.bytes == pytest.approx(2 * ROOT)]
    assert len(root) == 1 and root[0].phase == "fw" and root[0].count == 1
    assert root[0].exposed_s == root[0].seconds > 0            # nothing before it to hide behind
    blocks = [t for t in gathers if t.bytes == pytest.approx(2 * LAYER)]
    assert sorted(t.phase for t in blocks) == ["bw", "fw"] and all(t.count == 2 for t in blocks)  # the root stays
    reduce = {t.phase: t for t in stage.step_comm}
    assert reduce["step"].bytes == pytest.approx(4 * 2 * LAYER) and reduce["step-root"].bytes == pytest.approx(4 * ROOT)
    assert reduce["step-root"].exposed_s == reduce["step-root"].seconds
    assert stage.sync_after_s == pytest.approx(reduce["step"].exposed_s + reduce["step-root"].seconds)
    # without it: four equal units of ψ / 4, the first gather waited for, the gradients in 25 MB buckets
    off = _program(root=False).stages[0]
    assert {t.bytes for t in off.comm if t.axis == "dp"} == {2 * PSI / 4}
    assert [t.phase for t in off.step_comm] == ["step"] and off.step_comm[0].bytes == 4 * PSI


def test_each_micro_batch_reduces_the_root_again_where_the_stack_syncs_every_micro_batch():
    stage = _program(global_batch_size=8).stages[0]           # two micro-batches of 2 per rank
    root = [t for t in stage.step_comm if t.phase == "accum-root"]
    assert len(root) == 1 and root[0].count == 1 and root[0].bytes == pytest.approx(4 * ROOT)
    assert root[0].exposed_s == root[0].seconds


def test_memory_holds_the_root_beside_the_prefetched_block():
    """At the loss's backward the root is in use and one block prefetched: 2 B · (8,208 + 2,336); the
    consecutive-block window (embedding + layer 0, or layer 1 + head) is 2 B · (2,336 + 4,112) at most."""
    model, prog = _model(), _program()
    stage = type("S", (), {"blocks": tuple(model_index(model).block_items)})()
    reg = regime("bf16")
    assert gathered_params_bytes(stage, model, prog.cfg, LAY, reg, 1) == pytest.approx(2 * (ROOT + LAYER))
    off = _program(root=False)
    assert gathered_params_bytes(stage, model, off.cfg, LAY, reg, 1) == 2 * (LAYER + 4096 + 16)


def test_the_copy_out_copies_the_root_once_a_forward():
    """FSDP2's copy-out: one kernel per gathered unit, read + write of its bytes; the backward re-gathers
    the blocks only."""
    prog = _program()
    stage, cluster = prog.stages[0], invented_cluster(2)
    eff = device_efficiency(cluster.device)
    coster = type("C", (), {"device": cluster.device, "eff": eff})()

    def copy(params):
        return memory_seconds(2 * 2.0 * params, cluster.device, eff) + eff.launch_overhead_s
    fw, bw = fsdp_copy_out_s(stage.params, prog.cfg, prog.layout, prog.regime, coster, FsdpUnits(2, ROOT / PSI))
    assert fw == pytest.approx(2 * copy(LAYER) + copy(ROOT)) and bw == pytest.approx(2 * copy(LAYER))


def test_fsdp2_waits_for_each_reductions_gradient_copy_in():
    """FSDP2's copy-in (``Stack.fsdp_reduce_copy_in``): each unit's bf16 gradients read (2 B) and written
    into the fp32 reduce-scatter input (4 B), one kernel per unit, on the compute stream's clock — in
    every backward, since fsdp2 reduces every micro-batch. The stage's backward grows by exactly that;
    FSDP1 (flag off) and ZeRO below 3 pay nothing."""
    from simtrain.parallel.fsdp_comm import fsdp_reduce_copy_in_s
    cluster = invented_cluster(2)
    eff = device_efficiency(cluster.device)
    coster = type("C", (), {"device": cluster.device, "eff": eff})()

    def copy(params):
        return memory_seconds((2 + 4) * params, cluster.device, eff) + eff.launch_overhead_s
    for gbs in (4, 8):                                        # one and two micro-batches per rank
        prog = _program(global_batch_size=gbs)
        stage = prog.stages[0]
        s = fsdp_reduce_copy_in_s(stage.params, prog.cfg, prog.layout, prog.regime, coster, FsdpUnits(2, ROOT / PSI))
        assert s == pytest.approx(2 * copy(LAYER) + copy(ROOT))
        base = build_program(_model(), cluster, _cfg(global_batch_size=gbs).model_copy(
            update={"stack": prog.cfg.stack.with_overrides(fsdp_reduce_copy_in=False)})).stages[0]
        assert stage.bw_s - base.bw_s == pytest.approx(s)
        assert ("fsdp/reduce copy-in", "fsdp_copy_in") in {(t[0], t[1]) for t in stage.op_times}
    assert load_stack("fsdp2").fsdp_reduce_copy_in and not load_stack("llm-foundry").fsdp_reduce_copy_in
    zero1 = _program(zero_stage=1).stages[0]
    assert not any(t[0] == "fsdp/reduce copy-in" for t in zero1.op_times)
