"""Memory as frameworks allocate it: the stack's allocator model (reserved vs allocated), Megatron's
fp32 gradient buffer, ZeRO over dp × cp, the fp32 logits gradient, FSDP gathers per pipeline stage.

Hand-derived on tiny shapes:

* tiny MLP (tests/conftest.py): linear 100→200 + relu + linear 200→100, 40,000 parameters, one row
  per sample, micro-batch 10, on the invented 10 GB device (usable = 10e9 B).
* tiny GPT: 4 layers, s = 8, h = 16, a = 4, V = 32, biases, learned positions, tied LM head.
  Per layer 12h² + 13h = 3,280 parameters (QKV 3h² + 3h, proj h² + h, fc1 4h² + 4h, fc2 4h² + h,
  two LayerNorms 4h); embeddings V·h + s·h = 640; final LayerNorm 2h = 32. Σ = 13,792.
"""

from __future__ import annotations

import pytest

import simtrain as st
from simtrain.cost.memory import fp32_logits_grad_bytes, largest_gradient_bytes, param_memory, zero_degree
from simtrain.cost.precision import regime
from simtrain.errors import SpecError
from simtrain.estimator import build_program, estimate
from simtrain.parallel.memory_plan import stage_memories
from simtrain.report.step_report import MemoryReport
from simtrain.specs.stack import load_stack
from tests.conftest import invented_cluster, linear_op

S, H, A, V = 8, 16, 4, 32
LAYER_PARAMS = 12 * H * H + 13 * H      # 3,280
EMBED_PARAMS = V * H + S * H            # 640
USABLE = 10e9


def tiny_gpt(layers: int = 4):
    from simtrain.graph.model import build_model
    from simtrain.graph.spec import ModelSpec
    t = {"layers": layers, "hidden": H, "heads": A, "vocab": V, "dropout": 0.1}
    return build_model(ModelSpec.model_validate({"name": "tiny-gpt", "family": "transformer", "seq_len": S,
                                                 "transformer": t}))


def mlp_cfg(**kw):
    base = dict(global_batch_size=10, micro_batch_size=10, precision="fp32", optimizer="sgd")
    return st.TrainConfig(**{**base, **kw})


def stack(**knobs):
    return load_stack("reference").with_overrides(name="test", **knobs)


MLP_OPS = (linear_op("a", "b0", 1, 100, 200), linear_op("b", "b1", 1, 200, 100, tp_split="row"))  # 40,000 params


# --- reserved = state + transient · (1 + f) + w; fits on reserved -----------------------------------

def _report(**kw) -> MemoryReport:
    base = dict(params_bytes=100.0, grads_bytes=200.0, optimizer_bytes=300.0, activations_bytes=400.0,
                buffers_bytes=0.0, overhead_bytes=0.0, capacity_bytes=2000.0)
    return MemoryReport(**{**base, **kw})


def test_reserved_is_state_plus_transient_times_one_plus_reserve_plus_workspace():
    """The reserve grows on the transient tensors only (activations 400 + buffers 0); the state
    (params 100 + grads 200 + optimizer 300, allocated once) is reserved as allocated."""
    m = _report(reserve_fraction=0.25, workspace_bytes=500.0)
    assert m.total_bytes == 1000.0                      # allocated: the tensors
    assert (m.persistent_bytes, m.transient_bytes) == (600.0, 400.0)
    assert m.reserved_bytes == 600.0 + 400.0 * 1.25 + 500.0 == 1600.0
    assert m.reserve_bytes == 600.0
    assert m.fits and m.overflow_bytes == 0.0
    d = m.to_dict()
    assert (d["total_bytes"], d["reserved_bytes"], d["workspace_bytes"], d["reserve_fraction"]) == (1000, 1600, 500, .25)


def test_fits_flips_exactly_when_reserved_crosses_capacity():
    at = _report(reserve_fraction=0.5, workspace_bytes=800.0, capacity_bytes=2000.0)   # 600 + 400·1.5 + 800 = 2000
    over = _report(reserve_fraction=0.5, workspace_bytes=801.0, capacity_bytes=2000.0)
    assert at.reserved_bytes == 2000.0 and at.fits
    assert not over.fits and over.overflow_bytes == 1.0
    assert over.total_bytes < over.capacity_bytes       # the tensors alone would fit: the reserve does not
    assert over.largest_term() == ("reserve", 1001.0)   # 0.5·400 + 801


def test_stack_reserve_replaces_the_overhead_allowance_in_an_estimate(tiny_mlp, single):
    m = estimate(tiny_mlp, single, mlp_cfg(stack=stack(allocator_reserve_fraction=0.5, workspace_bytes=1e9))).memory
    assert m.overhead_bytes == 0.0                      # the stack's allocator model replaces the 5 % allowance
    assert m.total_bytes == 356_000                     # params 160,000 + grads 160,000 + acts 20,000 + buffers 16,000
    # the state (params + grads, 320,000) as allocated; the transient 36,000 with the 50 % reserve
    assert m.reserved_bytes == 320_000 + 36_000 * 1.5 + 1e9 == 1_000_374_000
    # an explicit memory_overhead_fraction still counts, on top of the stack's reserve
    m2 = estimate(tiny_mlp, single, mlp_cfg(stack=stack(workspace_bytes=1e9), memory_overhead_fraction=0.01)).memory
    assert m2.overhead_bytes == pytest.approx(0.01 * USABLE)
    assert m2.reserved_bytes == pytest.approx(356_000 + 0.01 * USABLE + 1e9)


def test_estimate_feasibility_flips_exactly_at_capacity(tiny_mlp, single):
    fits_w = USABLE - 374_000                           # reserved == usable exactly (all integers: exact)
    at = estimate(tiny_mlp, single, mlp_cfg(stack=stack(allocator_reserve_fraction=0.5, workspace_bytes=fits_w)))
    over = estimate(tiny_mlp, single, mlp_cfg(stack=stack(allocator_reserve_fraction=0.5, workspace_bytes=fits_w + 1)))
    assert at.memory.reserved_bytes == USABLE and at.memory.fits and at.feasible
    assert over.memory.overflow_bytes == 1.0 and not over.memory.fits and not over.feasible
    assert over.reasons and "out of memory" in over.reasons[0]


def test_text_report_shows_allocated_and_reserved(tiny_mlp, single):
    from simtrain.report.text import render_report
    text = render_report(estimate(tiny_mlp, single, mlp_cfg(stack=stack(allocator_reserve_fraction=0.1,
                                                                            workspace_bytes=2**30))))
    memory = text[text.index("memory of the peak device"):]
    assert memory.startswith("memory of the peak device (rank 0, pipeline stage 0; largest term: reserve)")  # 1 GiB workspace
    assert " allocated\n" in memory and "  reserved " in memory and "state + transient × 1.10 + 1.0 GiB workspace" in memory


# --- fp32 gradient buffer (Megatron main_grad) ------------------------------------------------------

def test_grad_fp32_buffer_holds_the_gradients_in_four_bytes_per_trainable_parameter():
    bf16 = regime("bf16")
    kw = dict(tp=1, sp=False, ep=1, dp=1, zero_stage=0)
    plain = param_memory(MLP_OPS, bf16, "adam", **kw)
    main = param_memory(MLP_OPS, bf16, "adam", grad_fp32_buffer=True, **kw)
    assert (plain.params_bytes, plain.grads_bytes, plain.optimizer_bytes) == (80_000, 80_000, 480_000)
    # Megatron-core "Distributed Optimizer": bf16 params + fp32 grads, the 16-bit gradient not kept
    assert main.grads_bytes == 4 * 40_000 == 160_000
    assert (main.params_bytes, main.optimizer_bytes) == (80_000, 480_000)
    # one buffer: accumulation goes into main_grad, not into a second buffer
    assert param_memory(MLP_OPS, bf16, "adam", accumulating=True, grad_fp32_buffer=True, **kw).grads_bytes == 160_000
    # without the stack's buffer, accumulation keeps the 16-bit gradients and an fp32 accumulator
    assert param_memory(MLP_OPS, bf16, "adam", accumulating=True, **kw).grads_bytes == 240_000
    # fp32 regimes: the gradients are fp32 already
    assert param_memory(MLP_OPS, regime("fp32"), "adam", grad_fp32_buffer=True, **kw).grads_bytes == 160_000


def test_a_16bit_main_grad_buffer_holds_two_bytes_per_parameter():
    """Megatron's --grad-reduce-in-bf16: main_grad in the parameters' dtype, accumulation included."""
    kw = dict(tp=1, sp=False, ep=1, dp=1, zero_stage=0, grad_fp32_buffer=True, grad_buffer_16bit=True)
    assert param_memory(MLP_OPS, regime("bf16"), "adam", accumulating=True, **kw).grads_bytes == 2 * 40_000


def test_megatrons_own_buffer_is_fp16_under_fp16_and_fp32_under_bf16_and_fp8():
    """grad_buffer_16bit "fp16" (Megatron's default: main_grad in fp32 exactly when --bf16 forces the fp32
    accumulation): 40,000 trainable parameters, 2 B each under fp16, 4 B under bf16 and fp8."""
    kw = dict(tp=1, sp=False, ep=1, dp=1, zero_stage=0, grad_fp32_buffer=True, grad_buffer_16bit="fp16",
              accumulating=True)
    assert param_memory(MLP_OPS, regime("fp16"), "adam", **kw).grads_bytes == 2 * 40_000
    assert param_memory(MLP_OPS, regime("bf16"), "adam", **kw).grads_bytes == 4 * 40_000
    assert param_memory(MLP_OPS, regime("fp8"), "adam", **kw).grads_bytes == 4 * 40_000


def test_the_megatron_presets_keep_megatrons_main_grad():
    for name in ("megatron-lm", "megatron-core"):
        s = st.load_stack(name)
        assert (s.grad_fp32_buffer, s.grad_buffer_16bit) == (True, "fp16"), name
    with pytest.raises(SpecError, match=r"grad_buffer_16bit: .*true, false or 'fp16'"):
        st.TrainConfig(global_batch_size=8, stack={"preset": "megatron-lm", "grad_buffer_16bit": "bf16"})


def test_fp8_params_store_the_fp8_gemms_weights_in_one_byte():
    """Megatron's --fp8-param-gather (TE fp8_model_init): the linear layers' weights in fp8, the
    vocab-parallel head (kept in bf16 by Transformer Engine) and the norms in 16 bit."""
    kw = dict(tp=1, sp=False, ep=1, dp=1, zero_stage=1)
    head = linear_op("head", "b2", 1, 100, 50, tp_split="vocab")  # 5,000 params, stays 16-bit
    fp8 = regime("fp8")
    assert param_memory((*MLP_OPS, head), fp8, "adam", fp8_params=True, **kw).params_bytes == 40_000 + 2 * 5_000
    assert param_memory((*MLP_OPS, head), fp8, "adam", **kw).params_bytes == 2 * 45_000
    assert param_memory(MLP_OPS, regime("bf16"), "adam", fp8_params=True, **kw).params_bytes == 80_000


def test_grad_fp32_buffer_is_sharded_like_gradients_over_dp_times_cp():
    bf16, kw = regime("bf16"), dict(tp=1, sp=False, ep=1, dp=2, cp=2, grad_fp32_buffer=True)
    assert param_memory(MLP_OPS, bf16, "adam", zero_stage=1, **kw).grads_bytes == 160_000   # ZeRO-1: not sharded
    assert param_memory(MLP_OPS, bf16, "adam", zero_stage=2, **kw).grads_bytes == 160_000 / 4


def test_grad_fp32_buffer_through_the_estimate(tiny_mlp, single):
    cfg = dict(precision="bf16", optimizer="adam")
    assert estimate(tiny_mlp, single, mlp_cfg(**cfg)).memory.grads_bytes == 80_000
    assert estimate(tiny_mlp, single, mlp_cfg(**cfg, stack=stack(grad_fp32_buffer=True))).memory.grads_bytes == 160_000


# --- ZeRO / FSDP over dp × cp -----------------------------------------------------------------------

def test_zero_shards_over_dp_times_cp():
    bf16 = regime("bf16")
    kw = dict(tp=1, sp=False, ep=1)
    z3 = param_memory(MLP_OPS, bf16, "adam", dp=2, cp=2, zero_stage=3, **kw)
    # Rajbhandari et al. 2020 §5: (2 + 2 + 12)·Ψ / N_d with N_d = dp · cp = 4
    assert (z3.params_bytes, z3.grads_bytes, z3.optimizer_bytes) == (20_000, 20_000, 120_000)
    z1 = param_memory(MLP_OPS, bf16, "adam", dp=2, cp=2, zero_stage=1, **kw)
    assert (z1.params_bytes, z1.grads_bytes, z1.optimizer_bytes) == (80_000, 80_000, 120_000)
    assert zero_degree(2, 2) == 4 and zero_degree(2, 2, ep=4, expert=True) == 1


def test_expert_weights_shard_over_the_expert_data_parallel_group():
    """Experts spread over ep; ZeRO shards them over dp · cp / ep more (not dp · cp)."""
    experts = (linear_op("e", "b0", 1, 100, 200, tp_split="expert"),)   # 20,000 params, 10,000 per rank at ep = 2
    pm = param_memory(experts, regime("bf16"), "adam", tp=1, sp=False, ep=2, dp=4, cp=1, zero_stage=1)
    assert pm.params_bytes == 10_000 * 2
    assert pm.optimizer_bytes == 10_000 * 12 / 2        # dp · cp / ep = 2


def test_zero_over_dp_times_cp_in_an_estimate():
    """dp = 2, cp = 2 shards like dp = 4 (N_d = 4); dp = 2, cp = 1 like dp = 2 — the memo keeps them apart."""
    model = tiny_gpt()
    base = dict(global_batch_size=8, micro_batch_size=1, precision="bf16", optimizer="adam", zero_stage=1)
    cp2 = estimate(model, invented_cluster(4), st.TrainConfig(**base, dp=2, cp=2)).memory
    dp4 = estimate(model, invented_cluster(4), st.TrainConfig(**base, dp=4)).memory
    dp2 = estimate(model, invented_cluster(2), st.TrainConfig(**base, dp=2)).memory
    psi = 4 * LAYER_PARAMS + EMBED_PARAMS + 2 * H       # 13,792, all on the one stage
    assert model.param_count == psi
    assert cp2.optimizer_bytes == dp4.optimizer_bytes == 12 * psi / 4
    assert dp2.optimizer_bytes == 12 * psi / 2


# --- fp32 logits and their gradient on the loss stage ----------------------------------------------

def test_the_graph_already_keeps_the_fp32_log_probabilities():
    """cross_entropy saves fp32 log-softmax (4 B/logit) + int64 targets (8 B/row), per sample."""
    loss = next(op for op in tiny_gpt().ops if op.kind == "cross_entropy")
    assert loss.saved.fixed_bytes == 4 * S * V + 8 * S == 1088
    assert loss.attr("log_softmax_bytes") == 4 * S * V


@pytest.mark.parametrize("tp,cp,b,expected", [
    (1, 1, 2, 2 * 8 * 32 * 4),        # b · s · V · 4 = 2048
    (2, 1, 2, 2 * 8 * 32 // 2 * 4),   # vocab-parallel: V / t → 1024
    (2, 2, 2, 2 * 4 * 32 // 2 * 4),   # context parallel: s / cp → 512
])
def test_fp32_logits_gradient_bytes_hand_derived(tp, cp, b, expected):
    head = tiny_gpt().block_ops("head")
    assert fp32_logits_grad_bytes(head, b / cp, regime("bf16"), tp) == expected
    assert fp32_logits_grad_bytes(head, b / cp, regime("fp32"), tp) == 0.0     # no upcast: already fp32


def test_fp32_logits_gradient_is_on_the_last_stage_only():
    """pp = 2, b = 2, bf16: stage 1 (layers.2, layers.3, head) buffers = the larger of the largest working
    set and the fp32 logits gradient 2·8·32·4 (two moments of the backward: the loss's gradient at its
    start, beside the saved log-probabilities; the largest op's gradients later, once those are freed)."""
    model = tiny_gpt()
    cfg = st.TrainConfig(global_batch_size=4, micro_batch_size=2, pp=2, dp=1, precision="bf16")
    program = build_program(model, invented_cluster(2), cfg)
    first, last = stage_memories(model, invented_cluster(2), cfg, program)
    reg = regime("bf16")
    for mem, stage in ((first, program.stages[0]), (last, program.stages[1])):
        ops = [op for b in stage.blocks for op in model.block_ops(b)]
        working = largest_gradient_bytes(ops, 2, reg, 1, False, 1)
        extra = 2 * S * V * 4 if "head" in stage.blocks else 0
        assert mem.buffers_bytes == max(working, extra)
    assert "head" in program.stages[1].blocks


# --- FSDP (ZeRO-3) with pipeline parallelism: per stage ----------------------------------------------

@pytest.mark.parametrize("prefetch,blocks", [(1, 2), (0, 1), (2, 3)])
def test_fsdp_gathers_this_stages_blocks_and_shards_over_its_dp(prefetch, blocks):
    """pp = 2, dp = 2, bf16, ZeRO-3: stage 0 holds embed + layers.0-1 (640 + 2·3,280 = 7,200 params),
    sharded over N_d = 2: 7,200 B of weights; it gathers its 1 + prefetch largest blocks (layers of
    3,280, then the 640 embedding) in bf16. Stage 1 holds layers.2-3 + head (+ the tied LM-head copy,
    V·h = 512): 7,104 params."""
    model = tiny_gpt()
    cfg = st.TrainConfig(global_batch_size=8, micro_batch_size=2, pp=2, dp=2, zero_stage=3, precision="bf16",
                         stack=stack(fsdp_prefetch_layers=prefetch))
    program = build_program(model, invented_cluster(4), cfg)
    s0, s1 = program.stages
    assert s0.blocks == ("embed", "layers.0", "layers.1") and s0.params.params_bytes == 7_200 * 2 / 2
    assert s1.params.params_count == 2 * LAYER_PARAMS + 2 * H + V * H and s1.params.params_bytes == 7_104 * 2 / 2
    from simtrain.parallel.memory_plan import gathered_params_bytes
    sizes = {1: LAYER_PARAMS, 2: 2 * LAYER_PARAMS, 3: 2 * LAYER_PARAMS + EMBED_PARAMS}
    assert gathered_params_bytes(s0, model, cfg, program.layout, regime("bf16"), prefetch) == sizes[blocks] * 2


def test_fsdp_without_resharding_keeps_the_stage_gathered_and_gathers_once():
    """reshard_after_forward=False: stage 0 keeps embed + layers.0-1 gathered (7,200 params, bf16) from
    the forward to the backward, and each micro-batch all-gathers once (forward) instead of twice."""
    model = tiny_gpt()
    base = dict(global_batch_size=8, micro_batch_size=2, pp=2, dp=2, zero_stage=3, precision="bf16",
                stack=stack(fsdp_prefetch_layers=1))
    keep = st.TrainConfig(**base, reshard_after_forward=False)
    free = st.TrainConfig(**base)
    cluster = invented_cluster(4)
    keep_mem, free_mem = (stage_memories(model, cluster, c, build_program(model, cluster, c))[0] for c in (keep, free))
    # buffers differ by the gathered window alone: all three blocks against the largest two (2 layers)
    assert keep_mem.buffers_bytes - free_mem.buffers_bytes == (EMBED_PARAMS + 2 * LAYER_PARAMS - 2 * LAYER_PARAMS) * 2
    gathers = lambda c: [t.phase for t in build_program(model, cluster, c).stages[0].comm  # noqa: E731
                         if t.axis == "dp" and t.kind == "allgather"]
    assert gathers(free) == ["fw", "bw"] and gathers(keep) == ["fw"]


# --- the reference stack changes nothing -------------------------------------------------------------

def test_reference_stack_leaves_every_number_unchanged(tiny_mlp, single):
    """The hand-derived numbers of test_estimate_single hold with no stack, 'reference' by name and the
    reference Stack object; reserved == allocated (no allocator model: the 5 % allowance instead)."""
    reports = [estimate(tiny_mlp, single, mlp_cfg(**kw)).memory
               for kw in ({}, {"stack": "reference"}, {"stack": load_stack("reference")})]
    for m in reports:
        assert (m.params_bytes, m.grads_bytes, m.optimizer_bytes, m.activations_bytes, m.buffers_bytes) == (
            160_000, 160_000, 0, 20_000, 16_000)
        assert m.overhead_bytes == pytest.approx(0.05 * USABLE)
        assert m.total_bytes == m.reserved_bytes == pytest.approx(356_000 + 5e8)
        assert (m.reserve_fraction, m.workspace_bytes, m.reserve_bytes) == (0.0, 0.0, 0.0)
        assert m.to_dict() == reports[0].to_dict()
    mixed = estimate(tiny_mlp, single, mlp_cfg(precision="bf16", optimizer="adam")).memory
    assert (mixed.params_bytes, mixed.grads_bytes, mixed.optimizer_bytes) == (80_000, 80_000, 480_000)


def test_stacks_do_not_share_memoised_results():
    """Same model object, same layout (one micro-batch per replica: no accumulation buffer), the
    fp32-buffer stack and the reference one differ."""
    model = tiny_gpt()
    cfg = dict(global_batch_size=4, micro_batch_size=2, dp=2, precision="bf16", optimizer="adam", zero_stage=2)
    ref = estimate(model, invented_cluster(2), st.TrainConfig(**cfg)).memory
    meg = estimate(model, invented_cluster(2), st.TrainConfig(**cfg, stack="megatron-core")).memory
    again = estimate(model, invented_cluster(2), st.TrainConfig(**cfg)).memory
    psi = model.param_count
    assert meg.stage == ref.stage == 0
    assert ref.grads_bytes == again.grads_bytes == 2 * psi / 2
    # megatron-core: zero_stage 2 given explicitly wins over its default 1; main_grad holds 4 B / param
    assert meg.grads_bytes == 4 * psi / 2
    assert meg.reserved_bytes == pytest.approx(meg.persistent_bytes + meg.transient_bytes * 1.05 + 2 * 2**30)
    assert ref.reserved_bytes == ref.total_bytes
