"""Memory as frameworks allocate it (issue 37), hand-derived on a tiny Llama-style model:

* per-op selective AC (recompute="selective-op", torchtitan ``selective_ac_option = "op"``);
* the fused cross-entropy kernel (llm-foundry's flash-attn ``CrossEntropyLoss``);
* FSDP's fp32 sharded gradients (``Stack.grad_fp32_buffer`` on the FSDP presets).

Tiny Llama: 2 layers, s = 8, h = 16, 4 heads of 4 (q width 16), 2 KV heads (k, v width 8 each), SwiGLU
with f = 32 (fc1 writes gate and up, 64 wide), RMSNorm, rotary, V = 32, no biases, fused attention.
"""

from __future__ import annotations

import pytest

import simtrain as st
from simtrain.cost.memory import activation_bytes_per_microbatch, fp32_logits_grad_bytes, op_sac_bytes
from simtrain.cost.precision import regime
from simtrain.estimator import build_program, estimate, prepare_model
from simtrain.parallel.recompute import SacRole, op_sac_plan, op_sac_roles
from simtrain.specs.stack import load_stack
from tests.conftest import invented_cluster

S, H, F, V = 8, 16, 32, 32


def tiny_llama():
    from simtrain.graph.model import build_model
    from simtrain.graph.spec import ModelSpec
    t = {"layers": 2, "hidden": H, "heads": 4, "kv_heads": 2, "vocab": V, "ffn_hidden": F, "activation": "swiglu",
         "norm": "rmsnorm", "position": "rotary", "biases": False, "flash_attention": True}
    return build_model(ModelSpec.model_validate({"name": "tiny-llama", "family": "transformer", "seq_len": S,
                                                 "transformer": t}))


def _cfg(**kw):
    base = dict(global_batch_size=2, micro_batch_size=2, precision="bf16", optimizer="adamw")
    return st.TrainConfig(**{**base, **kw})


# --- per-op selective AC ---------------------------------------------------------------------------

def test_op_sac_plan_alternates_the_layer_matmuls_in_execution_order():
    """wq (1st mm) saved, wk (2nd) recomputed, wv (3rd) saved; wo (4th) recomputed; w1 (5th) saved,
    w3 (6th) recomputed; w2 (7th) saved; attention's output kept; the rest re-run."""
    model = tiny_llama()
    roles = op_sac_plan(model.block_ops("layers.0"))
    assert roles["attn/qkv"] == SacRole(0.25, 0.75)     # widths 16, 8, 8: q + v = 24 of 32 kept
    assert roles["attn/proj"] == SacRole(1.0, 0.0)
    assert roles["mlp/fc1"] == SacRole(0.5, 0.5)        # gate kept, up re-run
    assert roles["mlp/fc2"] == SacRole(0.0, 1.0)
    assert roles["attn/core"] == SacRole(0.0, 1.0)      # fused kernel: output cached, not re-run
    for name in ("attn/norm", "attn/rope", "attn/add", "mlp/norm", "mlp/act", "mlp/add"):
        assert roles[name] == SacRole(1.0, 0.0), name
    assert op_sac_roles(model) == roles                 # both layers alike


def test_op_sac_keeps_the_layer_input_and_the_saved_outputs():
    """Per sample, bf16: input 8·16 + q and v 8·24 + attention output 8·16 + gate 8·32 + fc2 out 8·16
    = 832 elements · 2 B = 1,664 B, plus the attention's log-sum-exp 4 heads · 8 · 4 B = 128 B."""
    model = tiny_llama()
    ops = model.block_ops("layers.0")
    reg = regime("bf16")
    assert op_sac_bytes(ops, op_sac_roles(model), 1, reg, 1, False, 1) == 1664 + 128
    # in an estimate: each layer keeps that per sample (micro-batch 2); embedding and head keep everything
    none = estimate(model, st.Cluster.single(st.load_device("h100-sxm5-80gb")), _cfg()).memory
    sac = estimate(model, st.Cluster.single(st.load_device("h100-sxm5-80gb")), _cfg(recompute="selective-op")).memory
    layer_none = activation_bytes_per_microbatch(ops, 2, reg, "none", 1, False, 1)
    assert sac.activations_bytes == pytest.approx(none.activations_bytes - 2 * (layer_none - 2 * 1792))


def test_op_sac_recomputes_the_unsaved_share_of_the_forward():
    """Recompute FLOPs = full recomputation's less, per layer, 3/4 of qkv, all of attention, 1/2 of
    fc1 and all of fc2 (what the policy keeps is not re-run)."""
    model = tiny_llama()
    cluster = st.Cluster.single(st.load_device("h100-sxm5-80gb"))
    full = build_program(prepare_model(model, _cfg(recompute="full")), cluster, _cfg(recompute="full"))
    sac = build_program(prepare_model(model, _cfg(recompute="selective-op")), cluster, _cfg(recompute="selective-op"))
    ops = {op.name.split("/", 1)[1]: op for op in model.block_ops("layers.0")}
    kept = (0.75 * ops["attn/qkv"].flops.fw + ops["attn/core"].flops.fw + 0.5 * ops["mlp/fc1"].flops.fw
            + ops["mlp/fc2"].flops.fw)
    micro = 2
    assert sac.stages[0].recompute_flops == pytest.approx(full.stages[0].recompute_flops - 2 * micro * kept)
    assert 0 < sac.stages[0].recompute_s < full.stages[0].recompute_s


# --- fused cross-entropy -----------------------------------------------------------------------------

def test_fused_cross_entropy_keeps_the_logits_not_fp32_log_probs():
    """Upcast loss: fp32 log-probs 4·s·V kept and an fp32 logits gradient 4·s·V in the backward's
    working set; fused: the bf16 logits 2·s·V and a 4-byte lse per token, no fp32 gradient.
    Per sample s·V = 256: kept 1,024 + 64 (targets) → 512 + 32 + 64; micro-batch 2."""
    model = tiny_llama()
    cluster = st.Cluster.single(st.load_device("h100-sxm5-80gb"))
    base = load_stack("reference").with_overrides(name="t", workspace_bytes=1.0)
    up = estimate(model, cluster, _cfg(stack=base)).memory
    fused = estimate(model, cluster, _cfg(stack=base.with_overrides(loss_kernel="fused"))).memory
    assert up.activations_bytes - fused.activations_bytes == 2 * ((1024 + 64) - (512 + 32 + 64))
    assert fp32_logits_grad_bytes(model.ops, 2, regime("bf16"), 1) == 2 * 4 * S * V
    assert fp32_logits_grad_bytes(prepare_model(model, _cfg(stack="llm-foundry")).ops, 2, regime("bf16"), 1) == 0
    assert load_stack("llm-foundry").loss_kernel == "fused" and load_stack("fsdp2").loss_kernel == "eager"


def _loss_working(kernel: str, micro: int = 2) -> float:
    """The loss stage's backward working set with only the loss's gradients large: a 1-layer model
    whose vocabulary (4,096) dwarfs its hidden size (16)."""
    from simtrain.graph.model import build_model
    from simtrain.graph.spec import ModelSpec
    t = {"layers": 1, "hidden": H, "heads": 4, "vocab": 4096, "ffn_hidden": F, "activation": "swiglu",
         "norm": "rmsnorm", "position": "rotary", "biases": False, "flash_attention": True}
    model = build_model(ModelSpec.model_validate({"name": "wide-vocab", "family": "transformer", "seq_len": S,
                                                  "transformer": t}))
    stack = load_stack("reference").with_overrides(name="t", workspace_bytes=1.0, loss_kernel=kernel)
    return estimate(model, st.Cluster.single(st.load_device("h100-sxm5-80gb")), _cfg(stack=stack)).memory.buffers_bytes


def test_the_loss_backward_holds_as_many_fp32_gradients_as_its_kernel():
    """n = micro 2 · s 8 · V 4,096 = 65,536 logits. Upcast: one fp32 gradient 4n = 262,144 B; eager
    PyTorch (nll_loss and log_softmax gradients at once): 8n; Megatron in place: none, the working set
    is the largest op's bf16 gradients — the LM head's logits gradient 2n plus its input's."""
    n = 2 * S * 4096
    upcast, eager, in_place = (_loss_working(k) for k in ("upcast", "eager", "in-place"))
    assert upcast == 4 * n and eager == 8 * n
    assert in_place == 2 * n + 2 * 2 * S * H          # logits gradient + hidden gradient, bf16


# --- FSDP: fp32 sharded gradients --------------------------------------------------------------------

@pytest.mark.parametrize("global_batch", [4, 8])   # one micro-batch per replica, and two (accumulating)
def test_fsdp_gradients_are_fp32_on_the_shard_with_or_without_accumulation(global_batch):
    model = tiny_llama()
    psi = model.param_count
    cfg = _cfg(global_batch_size=global_batch, dp=2, stack="fsdp2")
    m = estimate(model, invented_cluster(2), cfg).memory
    assert m.grads_bytes == 4 * psi / 2                  # 4 B per parameter over the 2 FSDP ranks
    assert m.optimizer_bytes == 12 * psi / 2             # the fp32 shard (master) + two Adam moments
    ref = estimate(model, invented_cluster(2), _cfg(global_batch_size=global_batch, dp=2, zero_stage=3)).memory
    assert ref.grads_bytes == (2 if global_batch == 4 else 6) * psi / 2   # DeepSpeed-style 16-bit partitions


# --- a trainer's metrics evaluate the loss again (Stack.train_metric_losses) -------------------------

def test_train_metric_losses_add_a_forward_only_loss_op_timed_and_held_after_the_backward():
    """Composer's two train metrics (llm-foundry's preset: 2) re-run the loss on the kept logits after
    each micro-batch's backward. Per sample s·V = 256 logits, 2 calls, micro-batch 2 (one micro-batch):
    the op ``head/metrics`` reads the logits from the LM head, is costed in the forward only, and its
    seconds are what the step gains. Its moment after the backward holds the kept bf16 logits
    (2 · 2 · 256 = 1,024 B) and one call's fp32 upcast and log-probabilities (2 · 8 · 256 = 4,096 B)."""
    from simtrain.cost.compute import device_efficiency
    from simtrain.cost.memory import metric_peak_bytes
    from simtrain.cost.op_cost import op_cost
    model = tiny_llama()
    cluster = st.Cluster.single(st.load_device("h100-sxm5-80gb"))
    base = load_stack("reference").with_overrides(name="t", workspace_bytes=1.0, loss_kernel="fused")
    with_metrics = base.with_overrides(train_metric_losses=2)
    prepared = prepare_model(model, _cfg(stack=with_metrics))
    op = next(o for o in prepared.ops if o.name == "head/metrics")
    assert op.kind == "cross_entropy_metric" and op.attr("calls") == 2
    assert prepared.graph.has_edge("head/lm_head", "head/metrics")
    assert "head/metrics" not in {o.name for o in prepare_model(model, _cfg(stack=base)).ops}
    cost = op_cost(op, 2, regime("bf16"), cluster.device, device_efficiency(cluster.device), stack=with_metrics)
    assert cost.fw_s > 0 and cost.bw_s == 0
    before = estimate(model, cluster, _cfg(stack=base))
    after = estimate(model, cluster, _cfg(stack=with_metrics))
    assert after.time_breakdown_s["compute"] - before.time_breakdown_s["compute"] == pytest.approx(cost.fw_s)
    assert metric_peak_bytes(prepared.ops, 2, regime("bf16"), 1) == 2 * 2 * S * V + 2 * 8 * S * V
    # outside autograd: no gradients in the backward's working set, never recomputed
    assert not op.has_backward and all(o.has_backward for o in model.ops)
    assert after.memory.buffers_bytes == before.memory.buffers_bytes   # 5,120 B < the micro-batch's activations
    full = dict(recompute="full")
    assert (estimate(model, cluster, _cfg(stack=with_metrics, **full)).time_breakdown_s["recompute"]
            == estimate(model, cluster, _cfg(stack=base, **full)).time_breakdown_s["recompute"])
    assert load_stack("llm-foundry").train_metric_losses == 2 and load_stack("fsdp2").train_metric_losses == 0


def test_the_metrics_peak_counts_against_the_backward_not_on_top_of_it():
    """A 1-layer model whose vocabulary (4,096) dwarfs its hidden size: n = 2 · 8 · 4,096 = 65,536 logits
    per micro-batch. Fused loss: the backward's working set is the bf16 logits' gradient and the head
    input's (2n + 2 · 2 · 8 · 16); the metrics' moment needs 2n (kept logits) + 8n (fp32 upcast and
    log-probabilities) above the static memory, once the activations it follows are freed: the working
    bytes rise to 10n less the micro-batch's activations."""
    from simtrain.graph.model import build_model
    from simtrain.graph.spec import ModelSpec
    t = {"layers": 1, "hidden": H, "heads": 4, "vocab": 4096, "ffn_hidden": F, "activation": "swiglu",
         "norm": "rmsnorm", "position": "rotary", "biases": False, "flash_attention": True}
    model = build_model(ModelSpec.model_validate({"name": "wide-vocab", "family": "transformer", "seq_len": S,
                                                  "transformer": t}))
    cluster = st.Cluster.single(st.load_device("h100-sxm5-80gb"))
    base = load_stack("reference").with_overrides(name="t", workspace_bytes=1.0, loss_kernel="fused")
    plain = estimate(model, cluster, _cfg(stack=base)).memory
    metrics = estimate(model, cluster, _cfg(stack=base.with_overrides(train_metric_losses=2))).memory
    n = 2 * S * 4096
    assert plain.buffers_bytes == 2 * n + 2 * 2 * S * H
    assert metrics.activations_bytes == plain.activations_bytes
    assert metrics.buffers_bytes == 10 * n - metrics.activations_bytes


# --- FSDP2 copies each gather out into its parameters (Stack.fsdp_gather_copy_out) ---------------------

@pytest.mark.parametrize("reshard", [True, False])
def test_fsdp2_copy_out_reads_and_writes_every_gathered_byte_per_gather(reshard):
    """Tiny Llama on 2 FSDP ranks, bf16: each gather of the stage's ψ parameters (2 B each) is copied
    out of the flat buffer, read + write = 4ψ bytes, one kernel per block, in the forward and, resharded
    after it, in the backward. The step's compute grows by exactly those seconds; FSDP1 (flag off),
    ZeRO below 3 and a single rank pay nothing."""
    from simtrain.cost.compute import device_efficiency, memory_seconds
    from simtrain.parallel.fsdp_comm import fsdp_copy_out_s
    from simtrain.parallel.fsdp_units import FsdpUnits
    model = tiny_llama()
    cluster = invented_cluster(2)
    # a tiny model: keep the GPU's pace; every block one unit (the root unit: tests/unit/test_fsdp_root_unit.py)
    fsdp2 = load_stack("fsdp2").with_overrides(host_dispatch_s=0.0, fsdp_root_unit=False)
    on = _cfg(global_batch_size=4, dp=2, stack=fsdp2, reshard_after_forward=reshard)
    off = _cfg(global_batch_size=4, dp=2, reshard_after_forward=reshard,
               stack=fsdp2.with_overrides(fsdp_gather_copy_out=False))
    assert load_stack("fsdp2").fsdp_gather_copy_out and not load_stack("llm-foundry").fsdp_gather_copy_out
    prog = build_program(model, cluster, on)
    stage, blocks = prog.stages[0], len(prog.stages[0].blocks)
    psi = stage.params.params_count
    eff = device_efficiency(cluster.device)
    per_gather = blocks * (memory_seconds(2 * 2.0 * psi / blocks, cluster.device, eff) + eff.launch_overhead_s)
    coster = type("C", (), {"device": cluster.device, "eff": eff})()
    units = FsdpUnits(blocks)
    fw, bw = fsdp_copy_out_s(stage.params, prog.cfg, prog.layout, prog.regime, coster, units)
    assert fw == pytest.approx(per_gather) and bw == pytest.approx(per_gather if reshard else 0.0)
    base = build_program(model, cluster, off).stages[0]
    assert stage.fw_s - base.fw_s == pytest.approx(fw) and stage.bw_s - base.bw_s == pytest.approx(bw)
    alone = build_program(model, invented_cluster(1), _cfg(global_batch_size=2, stack=fsdp2))
    assert fsdp_copy_out_s(alone.stages[0].params, alone.cfg, alone.layout, alone.regime, coster, units) == (0.0, 0.0)
    zero1 = build_program(model, cluster, _cfg(global_batch_size=4, dp=2, stack=fsdp2, zero_stage=1))
    assert fsdp_copy_out_s(zero1.stages[0].params, zero1.cfg, zero1.layout, zero1.regime, coster, units) == (0.0, 0.0)
