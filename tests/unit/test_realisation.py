"""Realisation lines of the step (cost/realisation.py): hand-derived on one stage, and through estimate."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

import simtrain as st
from simtrain.cost.realisation import (
    comm_sm_share,
    hosts_of,
    interference_s,
    interference_slowdown,
    realisation_lines,
    slow_host_share,
)
from simtrain.cost.variability import sync_wait_seconds
from simtrain.parallel.comm_tasks import CommTask


def _stage(fw=1.0, bw=2.0, rc=0.0, kernels=100.0, comm=(), step_comm=()):
    return SimpleNamespace(fw_s=fw, bw_s=bw, recompute_s=rc, kernels=kernels, microbatch_s=fw + bw + rc,
                           comm=tuple(comm), step_comm=tuple(step_comm))


def test_idle_and_host_gaps_by_hand():
    """4 micro-batches of 3 s on a pipeline span of 15 s (a 3 s bubble): idle 0.1 × 15 = 1.5 s; host gaps
    10 µs × 100 kernels × 4 micro-batches × 15/12 = 5 ms."""
    stack = st.load_stack("reference").with_overrides(idle_gap_fraction=0.1, kernel_gap_s=10e-6)
    lines = realisation_lines(stack, _stage(), 4, 15.0, 8, 0.0)
    assert lines["idle_gaps"] == pytest.approx(1.5)
    assert lines["host_gaps"] == pytest.approx(10e-6 * 100 * 4 * 15.0 / 12.0)
    assert lines["stragglers"] == 0.0


def test_stragglers_are_the_extra_wait_over_the_device_jitter():
    stack = st.load_stack("reference").with_overrides(straggler_sigma=0.04)
    lines = realisation_lines(stack, _stage(), 4, 12.0, 64, 0.03)
    work = 4 * 3.0
    expected = sync_wait_seconds(work, 64, 0.05) - sync_wait_seconds(work, 64, 0.03)  # hypot(0.03, 0.04)
    assert lines["stragglers"] == pytest.approx(expected) and expected > 0
    assert realisation_lines(stack, _stage(), 4, 12.0, 1, 0.0)["stragglers"] == 0.0  # one rank waits for nobody


def test_slow_hosts_cost_their_loss_times_the_chance_one_is_among_the_hosts():
    """q = 0.5 % of hosts slow, a step with one losing 1.3 % of its 12 s span: on 1 host 0.013 × 0.005 ×
    12 s = 0.78 ms; on 100 hosts 0.013 × (1 − 0.995^100) × 12 s = 0.0613 s; on 10,000 the whole 0.156 s."""
    stack = st.load_stack("reference").with_overrides(slow_host_fraction=0.005, slow_host_step_loss=0.013)
    at = lambda hosts: realisation_lines(stack, _stage(), 4, 12.0, 8 * hosts, 0.0, hosts)["stragglers"]  # noqa: E731
    assert at(1) == pytest.approx(0.013 * 0.005 * 12.0)
    assert at(100) == pytest.approx(0.013 * (1 - 0.995 ** 100) * 12.0)
    assert at(10_000) == pytest.approx(0.013 * 12.0, rel=1e-12)
    assert slow_host_share(stack, 100) == pytest.approx(0.013 * (1 - 0.995 ** 100))
    assert slow_host_share(st.load_stack("reference"), 10_000) == 0.0  # the reference stack: none


def test_hosts_of_rounds_up_to_whole_nodes():
    assert (hosts_of(8, 8), hosts_of(9, 8), hosts_of(16_384, 8), hosts_of(3, 1)) == (1, 2, 2048, 3)


def test_slow_hosts_are_a_fleet_figure_in_every_gpu_preset_and_not_in_the_reference():
    for name in ("megatron-core", "megatron-lm", "deepspeed", "fsdp2", "fsdp2-compile", "llm-foundry", "ddp",
                 "generic-gpu"):
        s = st.load_stack(name)
        assert (s.slow_host_fraction, s.slow_host_step_loss) == (0.005, 0.013), name
    assert st.load_stack("reference").slow_host_step_loss == 0.0


def test_interference_is_the_hidden_comm_times_the_slowdown():
    """A per-micro-batch collective of 2 s hiding 1.5 s at slowdown 0.2 (0.3 s) × 4 micro-batches, and a step
    collective of 1 s fully hidden at 0.2 (0.2 s): 1.4 s."""
    mb = CommTask("tp", "allreduce", "fw", 1e6, 2.0, 1, overlap_s=1.5, slowdown=0.2)
    step = CommTask("dp", "reducescatter", "step", 1e6, 1.0, 1, overlap_s=5.0, slowdown=0.2)
    assert interference_s(_stage(comm=[mb], step_comm=[step]), 4) == pytest.approx(4 * 0.3 + 0.2)


def test_sm_share_adds_to_the_residual_and_is_capped():
    h100 = st.load_device("h100-sxm5-80gb")  # 132 SMs
    assert comm_sm_share(16, h100) == pytest.approx(16 / 132)
    stack = st.load_stack("reference").with_overrides(comm_sms=16, comm_compute_slowdown=0.1)
    assert interference_slowdown(stack, h100) == pytest.approx(16 / 132 + 0.1)
    assert interference_slowdown(stack.with_overrides(comm_compute_slowdown=1.0), h100) == 1.0
    assert comm_sm_share(16, st.load_device("host-cpu")) == 0.0


def _report(**knobs):
    stack = st.load_stack("fsdp2").with_overrides(**knobs)
    cfg = st.TrainConfig(global_batch_size=16, micro_batch_size=2, seq_len=1024, precision="bf16", stack=stack)
    return st.estimate("gpt2", st.load_cluster("dgx-a100-80gb", nodes=1), cfg)


def test_lines_are_in_the_breakdown_and_add_up_to_the_step():
    r = _report(idle_gap_fraction=0.1, kernel_gap_s=5e-6, straggler_sigma=0.02)
    b = r.time_breakdown_s
    assert {"interference", "idle_gaps", "host_gaps", "stragglers"} <= set(b)
    assert b["idle_gaps"] > 0 and b["host_gaps"] > 0 and b["stragglers"] > 0
    assert sum(b.values()) == pytest.approx(r.step_time_s, rel=1e-9)
    base = _report(idle_gap_fraction=0.0, kernel_gap_s=0.0, straggler_sigma=0.0, slow_host_step_loss=0.0)
    extra = b["idle_gaps"] + b["host_gaps"] + b["stragglers"]
    assert r.step_time_s == pytest.approx(base.step_time_s + extra, rel=1e-9)


def test_interference_line_moves_out_of_comm_exposed_without_changing_the_step():
    """comm_sms only: the step is what the same slowdown as a residual gives, and the hidden part's cost is
    its own line."""
    a = _report(idle_gap_fraction=0.0, comm_sms=20, comm_compute_slowdown=0.0)
    b = _report(idle_gap_fraction=0.0, comm_sms=0, comm_compute_slowdown=20 / 108)  # A100: 108 SMs
    assert a.step_time_s == pytest.approx(b.step_time_s, rel=1e-12)
    assert a.time_breakdown_s["interference"] > 0
    assert math.isclose(sum(a.time_breakdown_s.values()), a.step_time_s, rel_tol=1e-9)


def test_attention_realisation_slows_attention_only():
    fast, slow = _report(idle_gap_fraction=0.0), _report(idle_gap_fraction=0.0, attention_realisation=0.5)
    assert slow.step_time_s > fast.step_time_s
    attn = lambda r: sum(o.seconds for o in r.top_ops if "attn" in o.name or "attention" in o.kind)  # noqa: E731
    assert attn(slow) > attn(fast)


def test_an_fp8_run_is_not_held_against_16_bit_mfu_records():
    """NeMo-like Llama-2-7B in fp8 on 8 H100: its MFU (over the fp8 peak) is not compared with the
    best bf16 MFU on H100; the same run in bf16 still is."""
    from simtrain.report.sanity import public_mfu
    assert public_mfu().best("h100-sxm5-80gb", "gpu", "dense-transformer", "fp8") is None
    assert public_mfu().best("h100-sxm5-80gb", "gpu", "dense-transformer", "16-bit") is not None
    cfg = st.TrainConfig(global_batch_size=128, micro_batch_size=1, seq_len=4096, precision="fp8",
                         stack=st.load_stack("megatron-core").with_overrides(idle_gap_fraction=0.0))
    r = st.estimate("llama2-7b", st.load_cluster("dgx-h100", nodes=1), cfg)
    assert not any("publicly reported" in w for w in r.warnings)


def test_compute_by_class_adds_up_to_compute_and_recompute():
    r = _report(idle_gap_fraction=0.1)
    b = r.time_breakdown_s
    assert sum(r.compute_by_class_s.values()) == pytest.approx(b["compute"] + b["recompute"], rel=1e-9)
    assert max(r.compute_by_class_s, key=r.compute_by_class_s.get) == "matmul"


def test_interleaved_pipeline_sends_hide_when_the_stack_overlaps_them():
    """Megatron's overlap_p2p_comm: under the interleaved schedule the sends leave the critical path (what
    is left is the interference on their hidden time); under 1F1B they stay on it."""
    def run(schedule, share):
        stack = st.load_stack("reference").with_overrides(pp_comm_overlap=share)
        cfg = st.TrainConfig(global_batch_size=16, micro_batch_size=1, seq_len=1024, precision="bf16", pp=2,
                             virtual_stages=2 if schedule == "interleaved-1f1b" else 1,
                             pipeline_schedule=schedule, stack=stack)
        return st.estimate("gpt2", st.load_cluster("dgx-a100-80gb", nodes=2), cfg)
    plain, hidden = run("interleaved-1f1b", 0.0), run("interleaved-1f1b", 1.0)
    assert hidden.step_time_s < plain.step_time_s
    pp = lambda r: next(c for c in r.comm if c.axis == "pp")  # noqa: E731
    assert pp(hidden).exposed_s == pytest.approx(0.0, abs=1e-12) and pp(plain).exposed_s > 0
    assert run("1f1b", 1.0).step_time_s == pytest.approx(run("1f1b", 0.0).step_time_s, rel=1e-12)
    sim = st.simulate("gpt2", st.load_cluster("dgx-a100-80gb", nodes=2), hidden_cfg := st.TrainConfig(
        global_batch_size=16, micro_batch_size=1, seq_len=1024, precision="bf16", pp=2, virtual_stages=2,
        pipeline_schedule="interleaved-1f1b", stack=st.load_stack("reference").with_overrides(pp_comm_overlap=1.0)))
    assert hidden_cfg.pp == 2 and sim.step_time_s == pytest.approx(hidden.step_time_s, rel=1e-6)


def test_the_vectorized_path_carries_the_idle_share_exactly():
    """A stack with idle gaps (and the GPU default, generic-gpu) stays on the vectorized path, equal to
    the scalar estimate point by point."""
    from simtrain.search.vector import estimate_grid
    model, cluster = st.load_model("gpt2"), st.load_cluster("dgx-h100", nodes=1)
    for stack in (None, "fsdp2"):
        cfg = st.TrainConfig(global_batch_size=16, micro_batch_size=1, seq_len=512, precision="bf16",
                             **({"stack": stack} if stack else {}))
        df = estimate_grid(model, cluster, cfg, {"tp": [1, 2], "pp": [1, 2]})
        for _, row in df[df["valid"]].iterrows():
            c = cfg.model_copy(update={"tp": int(row["tp"]), "pp": int(row["pp"])})
            assert row["step_time_s"] == pytest.approx(st.estimate(model, cluster, c).step_time_s, rel=1e-12)
