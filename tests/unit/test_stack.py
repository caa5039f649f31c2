"""Software stacks as inputs: presets, overrides, and each mechanism a stack sets, derived by hand."""

from __future__ import annotations

import math

import pytest

import simtrain as st
from simtrain.cost.compute import compute_seconds, memory_seconds
from simtrain.cost.op_cost import FUSED_ATTENTION_BW_RATIO, op_cost
from simtrain.cost.precision import regime
from simtrain.graph.rules.registry import make_op
from simtrain.parallel.fsdp_comm import prefetched_exposed_s
from simtrain.parallel.program import CommTask, host_bound_s
from simtrain.specs.efficiency import AttentionKernel
from simtrain.specs.stack import load_stack, stack_names
from simtrain.specs.stack_resolve import resolve_stack

PRESETS = {"megatron-core", "megatron-lm", "fsdp2", "fsdp2-compile", "deepspeed", "ddp", "llm-foundry", "reference"}


def test_every_preset_the_issue_names_ships_and_validates():
    assert PRESETS <= set(stack_names())
    for name in stack_names():
        s = load_stack(name)
        assert s.name == name and len(s.source) > 10 and s.description


def test_unknown_preset_and_unknown_knob_are_errors_naming_the_field():
    with pytest.raises(Exception, match="not a preset"):
        st.TrainConfig(global_batch_size=8, stack="nope")
    with pytest.raises(Exception, match="stack.bogus"):
        st.TrainConfig(global_batch_size=8, stack={"preset": "fsdp2", "bogus": 1})


def test_preset_defaults_fill_only_fields_the_user_left_unset():
    cfg = resolve_stack(st.TrainConfig(global_batch_size=8, stack="fsdp2", dp_overlap=False))
    assert cfg.zero_stage == 3 and cfg.dp_overlap is False and cfg.flash_attention is True
    explicit = resolve_stack(st.TrainConfig(global_batch_size=8, stack="fsdp2", zero_stage=1))
    assert explicit.zero_stage == 1
    eager = resolve_stack(st.TrainConfig(global_batch_size=8, stack="megatron-lm"))
    assert eager.flash_attention is False and eager.dp_overlap is False
    assert resolve_stack(eager) is eager  # idempotent


def test_override_mapping_replaces_one_knob_and_keeps_the_rest():
    cfg = st.TrainConfig(global_batch_size=8, stack={"preset": "megatron-core", "tp_comm_overlap": 0.25})
    base = load_stack("megatron-core")
    assert cfg.stack.tp_comm_overlap == 0.25 and cfg.stack.attention_kernel == base.attention_kernel


# --- host dispatch -----------------------------------------------------------------------------
def test_prior_realisation_swaps_only_the_framework_gaps():
    """A framework a preset only stands for: the preset's kernels and their fitted realisation (the
    attention kernel, the interference residual), the idle and host gaps of the cross-stack prior."""
    core, prior = load_stack("megatron-core"), load_stack("generic-gpu")
    other = core.with_prior_realisation()
    assert other.idle_gap_fraction == prior.idle_gap_fraction and other.kernel_gap_s == prior.kernel_gap_s
    own = load_stack("llm-foundry")  # a stack whose own fitted idle share is not the prior's (the median's)
    assert own.with_prior_realisation().idle_gap_fraction == prior.idle_gap_fraction != own.idle_gap_fraction
    fsdp2 = load_stack("fsdp2")
    assert (other.attention_realisation, other.comm_sms, other.attention_kernel) == (
        core.attention_realisation, core.comm_sms, core.attention_kernel)
    assert fsdp2.with_prior_realisation().comm_sms == fsdp2.comm_sms == 16  # NCCL's SMs stay with the collectives
    assert "prior" in other.realisation_source
    cfg = st.TrainConfig(global_batch_size=8, stack={"preset": "megatron-core", "realisation": "prior"})
    assert cfg.stack == other
    with pytest.raises(ValueError, match="stack.realisation must be 'fitted'"):
        st.TrainConfig(global_batch_size=8, stack={"preset": "megatron-core", "realisation": "mine"})


def test_host_dispatch_runs_ahead_or_adds():
    ahead = load_stack("fsdp2").with_overrides(host_dispatch_s=10e-6, gpu_waits_on_cpu=False)
    waits = ahead.with_overrides(gpu_waits_on_cpu=True)
    # 100 kernels at 10 us = 1 ms of CPU time beside 0.4 ms / 3 ms of GPU time
    assert host_bound_s(0.4e-3, 100, ahead) == pytest.approx(1.0e-3)
    assert host_bound_s(3e-3, 100, ahead) == pytest.approx(3e-3)
    assert host_bound_s(0.4e-3, 100, waits) == pytest.approx(1.4e-3)


def test_a_tiny_model_under_an_eager_stack_is_cpu_bound():
    model, cluster = st.load_model("gpt2"), st.load_cluster("dgx-h100", nodes=1)
    base = dict(global_batch_size=8, micro_batch_size=1, seq_len=128, precision="bf16")
    gpu = st.estimate(model, cluster, st.TrainConfig(**base, stack="reference"))
    cpu = st.estimate(model, cluster, st.TrainConfig(**base, stack=load_stack("ddp").with_overrides(
        host_dispatch_s=1e-3)))
    assert cpu.step_time_s > 3 * gpu.step_time_s


# --- elementwise fusion --------------------------------------------------------------------------
def test_elementwise_fusion_scales_the_bytes_and_the_launches():
    op = make_op("gelu", "act", "b", shape=(4096, 8192))
    dev = st.load_device("h100-sxm5-80gb")
    eff = dev.efficiency
    reg = regime("bf16")
    eager = op_cost(op, 1, reg, dev, eff, stack=load_stack("reference"))
    fused = op_cost(op, 1, reg, dev, eff, stack=load_stack("reference").with_overrides(
        elementwise_bytes_fraction=0.5, elementwise_kernels_fraction=0.5))
    eager_bytes = (op.act_read.fw + op.act_write.fw) * reg.act_bytes
    assert eager.fw_s == pytest.approx(memory_seconds(eager_bytes, dev, eff) + eff.launch_overhead_s)
    assert fused.fw_s == pytest.approx(memory_seconds(0.5 * eager_bytes, dev, eff) + 0.5 * eff.launch_overhead_s)
    assert fused.fw_kernels == 0.5 and eager.fw_kernels == 1.0


# --- fused attention kernels ---------------------------------------------------------------------
def _attention(causal):
    return make_op("attention", "attn", "b", heads=16, head_dim=128, seq=4096, causal=causal, fused=True)


@pytest.mark.parametrize("causal", [False, True])
def test_fused_attention_uses_the_kernel_family_curve_and_backward_is_2_5x(causal):
    dev = st.load_device("h100-sxm5-80gb")
    kern = AttentionKernel(fw_peak_fraction=0.6, bw_peak_fraction=0.5, half_seq=1024, causal_half_seq=2048)
    eff = dev.efficiency.model_copy(update={"attention_kernels": {"fa3": kern}, "launch_overhead_s": 0.0})
    stack = load_stack("reference").with_overrides(attention_kernel="fa3")
    c = op_cost(_attention(causal), 1, regime("bf16"), dev, eff, stack=stack)
    fw_flops = 4 * 16 * 4096 * 4096 * 128 * ((4096 + 1) / (2 * 4096) if causal else 1.0)
    half = 2048 if causal else 1024
    peak = 989.4e12
    assert c.fw_s == pytest.approx(fw_flops / (peak * 0.6 * 4096 / (4096 + half)), rel=1e-6)
    assert c.bw_s == pytest.approx(FUSED_ATTENTION_BW_RATIO * fw_flops / (peak * 0.5 * 4096 / (4096 + half)),
                                   rel=1e-6)
    assert c.bw_flops == pytest.approx(2 * 4 * 16 * 4096 * 4096 * 128)  # model FLOPs keep the 2x convention


def test_a_kernel_family_the_device_lacks_falls_back_to_the_attention_curve():
    dev = st.load_device("v100-sxm2-32gb")
    eff = (dev.efficiency or st.load_device("h100-sxm5-80gb").efficiency).model_copy(update={"attention_kernels": {}})
    op = _attention(False)
    with_stack = op_cost(op, 1, regime("fp16"), dev, eff, stack=load_stack("reference").with_overrides(
        attention_kernel="fa3"))
    plain = op_cost(op, 1, regime("fp16"), dev, eff, stack=None)
    assert with_stack.fw_s == pytest.approx(plain.fw_s)


# --- communication -----------------------------------------------------------------------------
def test_hidden_communication_costs_only_the_interference_share():
    t = CommTask("tp", "allreduce", "fw", 1e6, seconds=1e-3, count=10, overlap_s=0.7 * 1e-2, slowdown=0.1)
    # 10 ms in all: 3 ms exposed, 7 ms hidden costing 10 % of themselves
    assert t.exposed_s == pytest.approx(3e-3 + 0.1 * 7e-3)


def test_tp_comm_overlap_share_hides_that_share():
    model, cluster = st.load_model("megatron-18.4b"), st.load_cluster("dgx-a100-80gb", nodes=1)
    base = dict(global_batch_size=8, micro_batch_size=1, seq_len=2048, precision="bf16", tp=8, recompute="full")
    def tp_exposed(share):
        from simtrain.estimator import build_program
        cfg = resolve_stack(st.TrainConfig(**base, stack=load_stack("megatron-lm").with_overrides(
            tp_comm_overlap=share)))
        prog = build_program(model, cluster, cfg)
        tasks = [t for t in prog.stages[0].comm if t.axis == "tp"]
        return sum(t.exposed_s for t in tasks), sum(t.total_s for t in tasks)
    none_exp, total = tp_exposed(0.0)
    part_exp, _ = tp_exposed(0.6)
    assert none_exp == pytest.approx(total)
    assert part_exp == pytest.approx(0.4 * total)


def test_async_input_gradient_collective_hides_half_the_backward_with_sp_and_all_without():
    """Megatron-Core's backward issues the column-parallel input-gradient collective before the weight-
    gradient GEMM: of a row op's backward pair (output-gradient all-gather + that reduce-scatter) half
    hides with sequence parallelism; without it the pair is that all-reduce alone, all hidden. The
    forward is untouched, and a larger --tp-comm-overlap share wins."""
    from simtrain.estimator import build_program
    model, cluster = st.load_model("megatron-18.4b"), st.load_cluster("dgx-a100-80gb", nodes=1)
    base = dict(global_batch_size=8, micro_batch_size=1, seq_len=2048, precision="bf16", tp=8)

    def shares(sp, overlap, dgrad_async=True):
        stack = load_stack("megatron-lm").with_overrides(tp_comm_overlap=overlap, tp_dgrad_comm_async=dgrad_async)
        prog = build_program(model, cluster, resolve_stack(st.TrainConfig(**base, sequence_parallel=sp, stack=stack)))
        return {t.phase: t.overlap_s / t.total_s for t in prog.stages[0].comm if t.axis == "tp"}
    assert shares(True, 0.0) == pytest.approx({"fw": 0.0, "bw": 0.5})
    assert shares(False, 0.0) == pytest.approx({"fw": 0.0, "bw": 1.0})
    assert shares(True, 0.7) == pytest.approx({"fw": 0.7, "bw": 0.7})
    assert shares(True, 0.0, dgrad_async=False) == pytest.approx({"fw": 0.0, "bw": 0.0})
    assert load_stack("megatron-core").tp_dgrad_comm_async and not load_stack("megatron-lm").tp_dgrad_comm_async


def test_fp8_gathers_the_norm_output_in_fp8_and_reduce_scatters_in_bf16():
    """Under fp8 with sequence parallelism the forward's all-gather moves the fp8 norm output (1 byte an
    element) and the reduce-scatter the bf16 GEMM output (2 bytes); the backward's pair stays at 2 each."""
    from simtrain.estimator import build_program
    from simtrain.parallel.comm import ClusterComm
    model, cluster = st.load_model("megatron-18.4b"), st.load_cluster("dgx-h100", nodes=1)
    base = dict(global_batch_size=8, micro_batch_size=1, seq_len=2048, tp=8, sequence_parallel=True,
                stack=load_stack("megatron-lm"))

    def tp_tasks(precision):
        prog = build_program(model, cluster, resolve_stack(st.TrainConfig(**base, precision=precision)))
        return {t.phase: t for t in prog.stages[0].comm if t.axis == "tp"}, prog
    bf16, prog = tp_tasks("bf16")
    fp8, _ = tp_tasks("fp8")
    n = bf16["fw"].bytes
    comm = ClusterComm(cluster, prog.layout, resolve_stack(st.TrainConfig(**base, precision="fp8")),
                       cluster.device.efficiency)
    ag, rs = (lambda b: comm._collective("tp", "allgather", b)), (lambda b: comm._collective("tp", "reducescatter", b))
    assert fp8["fw"].bytes == n and bf16["fw"].seconds == pytest.approx(ag(n) + rs(n), rel=1e-6)
    assert fp8["fw"].seconds == pytest.approx(ag(n / 2) + rs(n), rel=1e-6)
    assert fp8["bw"].seconds == pytest.approx(bf16["bw"].seconds)


def test_fsdp_prefetch_exposes_the_first_gather_and_what_compute_cannot_cover():
    # 10 layers, 2 ms gather, 1.5 ms compute per layer: 2 + 9 x 0.5 = 6.5 ms; without prefetch 20 ms
    assert prefetched_exposed_s(2e-3, 1.5e-3, 10, 1) == pytest.approx(6.5e-3)
    assert prefetched_exposed_s(2e-3, 3e-3, 10, 1) == pytest.approx(2e-3)
    assert prefetched_exposed_s(2e-3, 3e-3, 10, 0) == pytest.approx(20e-3)


def test_link_half_bytes_is_the_chunk_size_of_half_bus_bandwidth():
    """A ring all-reduce of S over 8 ranks moves chunks of S/8: with link_half_bytes = S/8 its bandwidth
    term doubles; a send moves S whole."""
    from simtrain.cost.collectives import collective_time
    from simtrain.parallel.program import Layout
    from simtrain.parallel.topology import group_topology
    cluster = st.load_cluster("dgx-h100", nodes=1)
    topo = group_topology(cluster, Layout(1, 8, 1, 1, 1, 1, 1, 1), "tp", "tp-cp-ep-dp-pp")
    eff = cluster.device.efficiency.model_copy(update={"link_half_bytes": 0.0, "link_latency_scale": 1e-6})
    size = 64 * 2**20

    def t(kind, half):
        return collective_time(kind, size, topo, efficiency=eff.model_copy(update={"link_half_bytes": half})).seconds
    assert t("allreduce", size / 8) == pytest.approx(2 * t("allreduce", 0.0), rel=0.02)
    assert t("sendrecv", float(size)) == pytest.approx(2 * t("sendrecv", 0.0), rel=0.02)


def test_sustained_clock_scales_compute_time():
    dev = st.load_device("h100-sxm5-80gb")
    eff = dev.efficiency
    slow = eff.model_copy(update={"sustained_clock_fraction": 0.8})
    from simtrain.glossary import DType, OpClass
    a = compute_seconds(1e12, OpClass.MATMUL, dev, DType.BF16, eff)
    b = compute_seconds(1e12, OpClass.MATMUL, dev, DType.BF16, slow)
    assert b == pytest.approx(a / 0.8)


def test_the_default_stack_is_generic_gpu_on_a_gpu_and_reference_elsewhere():
    model = st.load_model("gpt2")
    base = dict(global_batch_size=16, micro_batch_size=2, seq_len=512, precision="bf16")
    gpu = st.load_cluster("dgx-h100", nodes=1)
    a = st.estimate(model, gpu, st.TrainConfig(**base))
    b = st.estimate(model, gpu, st.TrainConfig(**base, stack="generic-gpu"))
    assert a.stack == "generic-gpu" and a.step_time_s == b.step_time_s and math.isfinite(a.step_time_s)
    assert st.load_stack("generic-gpu").idle_gap_fraction > 0  # the fit pool's cross-stack prior
    ref = st.estimate(model, gpu, st.TrainConfig(**base, stack="reference"))
    assert ref.step_time_s < a.step_time_s
    cpu = st.Cluster.single(st.load_device("host-cpu"))
    c = st.estimate(model, cpu, st.TrainConfig(global_batch_size=2, micro_batch_size=2, seq_len=64, precision="fp32"))
    assert c.stack == "reference"


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_estimates_a_llama(name):
    model, cluster = st.load_model("llama3-8b"), st.load_cluster("dgx-h100", nodes=1)
    r = st.estimate(model, cluster, st.TrainConfig(global_batch_size=16, micro_batch_size=1, seq_len=4096,
                                                   precision="bf16", stack=name, recompute="full"))
    assert math.isfinite(r.step_time_s) and 0 < r.mfu < 1


def test_docs_stacks_page_is_generated_from_the_presets():
    from pathlib import Path

    from simtrain.cli.stacks import stacks_markdown
    page = Path(__file__).parents[2] / "docs" / "stacks.md"
    assert page.read_text(encoding="utf-8").strip() == stacks_markdown().strip(), \
        "regenerate: python -m simtrain.cli.stacks > docs/stacks.md"


def test_cli_lists_and_shows_stacks(capsys):
    from simtrain.cli import main
    assert main(["stacks"]) == 0
    assert "megatron-core" in capsys.readouterr().out
    assert main(["stacks", "show", "fsdp2"]) == 0
    assert "host_dispatch_s" in capsys.readouterr().out
    assert main(["stacks", "show", "nope"]) == 2


def test_cli_estimate_takes_a_stack_and_a_calibration(tmp_path, capsys):
    from simtrain.cli import main
    path = st.Calibration(factors={"compute": 0.5}).to_yaml(tmp_path / "cal.yaml")
    args = ["estimate", "--model", "gpt2", "--hardware", "dgx-h100", "--nodes", "1", "--global-batch-size", "16",
            "--seq-len", "512", "--json"]
    import json
    assert main(args + ["--stack", "fsdp2"]) == 0
    fast = json.loads(capsys.readouterr().out)["step_time_s"]
    assert main(args + ["--stack", "fsdp2", "--calibration", str(path)]) == 0
    slow = json.loads(capsys.readouterr().out)["step_time_s"]
    assert slow > fast
    assert main(args + ["--stack", "bogus"]) == 2


# --- fp8 -----------------------------------------------------------------------------------------
def _linear(rows=4096, k=4096, n=8192):
    return make_op("linear", "fc", "b", rows=rows, in_features=k, out_features=n, bias=False)


@pytest.mark.parametrize("recipe, passes", [("delayed", 1.0), ("tensorwise", 1.5), ("rowwise", 2.5)])
def test_fp8_linear_runs_at_the_fp8_peak_plus_its_cast_passes(recipe, passes):
    from simtrain.cost.op_cost import FP8_CAST_PASSES
    from simtrain.glossary import DType, OpClass
    dev = st.load_device("h100-sxm5-80gb")
    eff = dev.efficiency.model_copy(update={"launch_overhead_s": 0.0})
    op = _linear()
    stack = load_stack("reference").with_overrides(fp8_recipe=recipe)
    c = op_cost(op, 1, regime("fp8"), dev, eff, stack=stack)
    assert FP8_CAST_PASSES[recipe] == passes
    gemm_fw = compute_seconds(2 * 4096 * 4096 * 8192, OpClass.MATMUL, dev, DType.FP8, eff, op.gemm, 4096)
    # forward casts X (4096 x 4096) and W (8192 x 4096). Transformer Engine (delayed): one
    # fp8_cast_transpose_fused pass, read 2 B + write the copy and its transpose 1 + 1 B; torchao:
    # read 2 B + write 1 B per element per pass
    per_element = 4.0 if recipe == "delayed" else 3.0 * passes
    cast_fw = memory_seconds(per_element * (4096 * 4096 + 8192 * 4096), dev, eff)
    assert c.fw_s == pytest.approx(gemm_fw + cast_fw, rel=1e-9)
    assert c.fw_kernels == 1 + 2
    if recipe == "delayed":
        # dY (4096 x 8192) cast with its transpose once, in the input-gradient phase (4 B an element
        # against tensorwise's 1.5 passes of 3 B); the weight gradient reads the transposed X and dY
        # copies, where tensorwise casts both again (3 B an element, two kernels)
        tensorwise = op_cost(op, 1, regime("fp8"), dev, eff,
                             stack=load_stack("reference").with_overrides(fp8_recipe="tensorwise"))
        dy, x = 4096 * 8192, 4096 * 4096
        assert c.agrad_s - tensorwise.agrad_s == pytest.approx(
            memory_seconds(4.0 * dy, dev, eff) - memory_seconds(4.5 * dy, dev, eff), rel=1e-9)
        assert tensorwise.wgrad_s - c.wgrad_s == pytest.approx(memory_seconds(3.0 * (x + dy), dev, eff), rel=1e-9)


def test_fp8_weight_cache_casts_the_weight_once_a_step_not_in_each_forward():
    """Megatron-Core / TE ``is_first_microbatch``: the forward casts X alone; the weight's cast (read
    2 B, write the fp8 copy and its transpose, 1 + 1 B) is charged once a step with the optimizer."""
    from simtrain.cost.fp8_cast import FP8_WEIGHT_CAST_BYTES, fp8_weight_cast_seconds
    from simtrain.glossary import DType, OpClass
    from simtrain.parallel.stage_state import stage_fp8_weight_cast_seconds
    dev = st.load_device("h100-sxm5-80gb")
    eff = dev.efficiency.model_copy(update={"launch_overhead_s": 0.0})
    op = _linear()
    cached = load_stack("reference").with_overrides(fp8_weight_cache=True)
    c = op_cost(op, 1, regime("fp8"), dev, eff, stack=cached)
    gemm_fw = compute_seconds(2 * 4096 * 4096 * 8192, OpClass.MATMUL, dev, DType.FP8, eff, op.gemm, 4096)
    assert c.fw_s == pytest.approx(gemm_fw + memory_seconds(4.0 * 4096 * 4096, dev, eff), rel=1e-9)
    assert c.fw_kernels == 1 + 1
    # backward unchanged: dY cast with its transpose
    plain = op_cost(op, 1, regime("fp8"), dev, eff, stack=load_stack("reference"))
    assert (c.agrad_s, c.wgrad_s) == (plain.agrad_s, plain.wgrad_s)
    assert FP8_WEIGHT_CAST_BYTES == 4.0
    once = memory_seconds(4.0 * 4096 * 8192, dev, eff)
    assert fp8_weight_cast_seconds(4096 * 8192, dev, eff) == pytest.approx(once, rel=1e-9)
    column = make_op("linear", "fc", "b", rows=4096, in_features=4096, out_features=8192, bias=False,
                     tp_split="column")
    half = memory_seconds(2.0 * 4096 * 8192, dev, eff)  # tp 2: half the weight, 4 B an element

    from types import SimpleNamespace
    coster = SimpleNamespace(device=dev, eff=eff)
    from simtrain.parallel.layout import Layout
    lay = Layout(1, 1, 1, 1, 1, 1, 8, 1)
    cfg = st.TrainConfig(global_batch_size=8, seq_len=4096, precision="fp8")
    items = [(op, 3, None, None)]
    on = cfg.model_copy(update={"stack": cached})
    assert stage_fp8_weight_cast_seconds(items, on, lay, regime("fp8"), coster) == pytest.approx(3 * once)
    off = cfg.model_copy(update={"stack": load_stack("reference")})
    assert stage_fp8_weight_cast_seconds(items, off, lay, regime("fp8"), coster) == 0.0
    assert stage_fp8_weight_cast_seconds(items, on, lay, regime("bf16"), coster) == 0.0
    tp2 = Layout(1, 2, 1, 1, 1, 1, 8, 1)
    assert stage_fp8_weight_cast_seconds([(column, 1, None, None)], on, tp2, regime("fp8"), coster) == \
        pytest.approx(half, rel=1e-9)


def test_fp8_weight_cache_moves_the_cast_from_every_micro_batch_to_the_step():
    """An fp8 step with 8 micro-batches: caching takes 7 of the 8 weight casts off the step."""
    model, cluster = st.load_model("llama3-8b"), st.load_cluster("dgx-h100", nodes=1)
    base = dict(global_batch_size=64, micro_batch_size=1, seq_len=2048, precision="fp8", tp=8)

    def step(cache):
        stack = load_stack("megatron-core").with_overrides(fp8_weight_cache=cache)
        return st.estimate(model, cluster, st.TrainConfig(**base, stack=stack))
    on, off = step(True), step(False)
    assert on.step_time_s < off.step_time_s
    assert on.time_breakdown_s["optimizer"] > off.time_breakdown_s["optimizer"]
    assert on.time_breakdown_s["compute"] < off.time_breakdown_s["compute"]


def test_fp8_leaves_attention_and_the_lm_head_in_bf16():
    from simtrain.cost.op_cost import runs_in_fp8
    reg = regime("fp8")
    assert runs_in_fp8(_linear(), reg)
    assert not runs_in_fp8(_attention(True), reg)
    head = make_op("linear", "head", "b", rows=16, in_features=32, out_features=64, tp_split="vocab")
    assert not runs_in_fp8(head, reg)
    dev = st.load_device("h100-sxm5-80gb")
    att8 = op_cost(_attention(True), 1, reg, dev, dev.efficiency, stack=load_stack("reference"))
    att16 = op_cost(_attention(True), 1, regime("bf16"), dev, dev.efficiency, stack=load_stack("reference"))
    assert att8.fw_s == pytest.approx(att16.fw_s)


def test_fp8_allgather_halves_the_fsdp_gather_bytes():
    from simtrain.estimator import build_program
    model, cluster = st.load_model("llama3-8b"), st.load_cluster("dgx-h100", nodes=1)

    def gathered(flag):
        cfg = resolve_stack(st.TrainConfig(global_batch_size=8, seq_len=1024, precision="fp8",
                                           stack=load_stack("fsdp2").with_overrides(fp8_allgather=flag)))
        prog = build_program(model, cluster, cfg)
        return sum(t.bytes * t.count for t in prog.stages[0].step_comm if t.kind == "allgather")
    assert gathered(True) == pytest.approx(gathered(False) / 2)


def test_a_link_with_its_own_fraction_uses_it_and_the_rest_keep_the_device_fraction():
    """components.md §4c: NCCL reaches ~96 % of HDR across nodes vs ~75 % of NVLink inside a node."""
    from simtrain.parallel.topology import p2p_time
    cluster = st.load_cluster("dgx-a100-80gb", nodes=2)
    base = cluster.device.efficiency.model_copy(update={"link_half_bytes": 0.0, "link_latency_scale": 1e-9,
                                                         "link_fractions": {}})
    size = 256 * 2**20
    uniform = p2p_time(size, cluster, "network", efficiency=base).seconds
    own = p2p_time(size, cluster, "network", efficiency=base.model_copy(update={"link_fractions": {"ib-hdr": 0.96}}))
    assert own.seconds == pytest.approx(uniform * base.link_bandwidth_fraction / 0.96, rel=1e-3)
    inside = p2p_time(size, cluster, "fabric", efficiency=base).seconds
    assert p2p_time(size, cluster, "fabric", efficiency=base.model_copy(
        update={"link_fractions": {"ib-hdr": 0.96}})).seconds == pytest.approx(inside)


def test_calibrated_communication_scales_the_per_link_fractions_too():
    cluster = st.load_cluster("dgx-a100-80gb", nodes=2)
    eff = st.Calibration(factors={"communication": 0.5}).apply(cluster).device.efficiency
    assert eff.link_fractions["ib-hdr"] == pytest.approx(0.48)


def test_cpu_comm_compute_slowdown_by_hand():
    from simtrain.cost.realisation import cpu_comm_compute_slowdown
    assert cpu_comm_compute_slowdown(2, 2, 1) == 1.0  # 2 ranks × (1 compute + 1 comm) on 2 cores: none spare
    assert cpu_comm_compute_slowdown(4, 2, 1) == 0.0  # a spare core per rank
    assert cpu_comm_compute_slowdown(3, 2, 1) == 0.5  # (2·2 − 3) / 2: one of two ranks lacks one
    assert cpu_comm_compute_slowdown(64, 8, 7) == 0.0 and cpu_comm_compute_slowdown(8, 1, 8) == 1.0
    with pytest.raises(ValueError, match="≥ 1"):
        cpu_comm_compute_slowdown(0, 2, 1)


def test_ddp_on_cpu_overlap_hides_nothing_without_a_spare_core():
    """The validation's DDP prediction: with the ranks' compute on every core, the overlapped
    all-reduce costs its whole time (overlap = no overlap, closed form and simulator); with a spare
    core per rank it hides behind the backward."""
    from validation.ddp import dp_cluster, predict_ddp
    dev, link = st.load_device("host-cpu"), st.load_link("pcie-gen4-x16")
    model = st.load_model("mlp-mnist")
    for engine in ("estimate", "simulate"):
        busy = dp_cluster(dev, link, cores=2)
        on, off = (predict_ddp(model, busy, 8, "sgd", o, engine=engine).step_time_s for o in (True, False))
        assert on == pytest.approx(off, rel=1e-9)
        spare = dp_cluster(dev, link, cores=4)
        on, off = (predict_ddp(model, spare, 8, "sgd", o, engine=engine).step_time_s for o in (True, False))
        assert on < off
