"""Gradient reductions in every micro-batch (``Stack.grad_sync_every_micro_batch_from_zero``: FSDP
without ``no_sync``, DeepSpeed from ZeRO-2): the m − 1 earlier reductions, each behind its own
micro-batch's backward."""

from __future__ import annotations

import pytest

import simtrain as st
from simtrain.estimator import build_program
from simtrain.parallel.comm_tasks import _bucketed_exposed
from simtrain.parallel.fsdp_comm import grad_sync_units
from simtrain.parallel.fsdp_units import fsdp_units
from simtrain.specs.stack import load_stack
from simtrain.specs.stack_resolve import resolve_stack

MODEL = "llama3-8b"


def _program(every: bool, nodes: int = 4, gbs: int = 256, pp: int = 1, **extra):
    stack = load_stack("fsdp2").with_overrides(grad_sync_every_micro_batch_from_zero=0 if every else None, **extra)
    cfg = resolve_stack(st.TrainConfig(global_batch_size=gbs, micro_batch_size=1, seq_len=2048, precision="bf16",
                                       pp=pp, stack=stack))
    return build_program(st.load_model(MODEL), st.load_cluster("dgx-h100", nodes=nodes), cfg)


def test_m_minus_one_more_reductions_each_behind_its_micro_batch():
    # 32 GPUs, 256 sequences of 1: 8 micro-batches per rank; 7 reductions before the step's own
    prog = _program(True)
    stage = prog.stages[0]
    m = prog.layout.micro_batches
    assert m == 8
    last = next(t for t in stage.step_comm if t.phase == "step")
    accum = next(t for t in stage.step_comm if t.phase == "accum")
    assert (accum.kind, accum.count, accum.seconds, accum.bytes) == ("reducescatter", m - 1, last.seconds, last.bytes)
    # each hides behind one micro-batch's backward less the parameter gathers on the same link
    gathers = sum(t.total_s for t in stage.comm if t.axis == "dp" and t.phase == "bw")
    hide = stage.backward_s - gathers
    cfg = prog.cfg
    # fsdp2 reduces each block's gradients as one bucket (its root unit: tests/unit/test_fsdp_root_unit.py)
    units = fsdp_units(st.load_model(MODEL), stage.blocks, cfg, prog.layout)
    bucket = grad_sync_units(stage.params, cfg, prog.regime, units)[1]
    assert units.root_share > 0 and bucket == pytest.approx(last.bytes / 32)  # 32 blocks
    exposed = _bucketed_exposed(last.seconds, last.bytes, bucket, hide)
    slow = cfg.stack.comm_compute_slowdown
    assert accum.exposed_s == pytest.approx((m - 1) * (exposed + slow * (last.seconds - exposed)))
    # and the root unit's reduction after each, exposed
    root = next(t for t in stage.step_comm if t.phase == "accum-root")
    step_root = next(t for t in stage.step_comm if t.phase == "step-root")
    assert (root.count, root.seconds) == (m - 1, step_root.seconds) and root.exposed_s == root.total_s
    off = _program(False).stages[0]
    assert not [t for t in off.step_comm if t.phase.startswith("accum")]
    assert stage.sync_after_s == pytest.approx(off.sync_after_s + accum.exposed_s + root.exposed_s)


def test_no_accumulation_or_pipelining_adds_nothing():
    one = _program(True, nodes=1, gbs=8)                        # 8 ranks, 8 sequences: one micro-batch
    assert one.layout.micro_batches == 1
    assert not [t for t in one.stages[0].step_comm if t.phase == "accum"]
    piped = _program(True, nodes=1, gbs=64, pp=2)               # pipeline schedules sync on the last backward
    assert piped.layout.micro_batches > 1
    assert not [t for s in piped.stages for t in s.step_comm if t.phase == "accum"]


@pytest.mark.filterwarnings("error::RuntimeWarning")   # a vectorized point falling back would warn
def test_the_step_grows_by_the_extra_reductions_in_both_engines_and_the_sweep():
    model, cluster = st.load_model(MODEL), st.load_cluster("dgx-h100", nodes=4)

    def cfg(every):
        return st.TrainConfig(global_batch_size=256, micro_batch_size=1, seq_len=2048, precision="bf16",
                              stack=load_stack("fsdp2").with_overrides(
                                  grad_sync_every_micro_batch_from_zero=0 if every else None))
    on, off = st.estimate(model, cluster, cfg(True)), st.estimate(model, cluster, cfg(False))
    assert on.step_time_s > off.step_time_s
    assert st.simulate(model, cluster, cfg(True)).step_time_s == pytest.approx(on.step_time_s, rel=1e-6)
    grid = {"global_batch_size": [64, 128, 256, 512]}      # 2, 4, 8 and 16 micro-batches per rank
    swept = st.sweep(model, cluster, cfg(True), grid)     # "auto": the vectorized rows
    for gbs, row in zip(grid["global_batch_size"], swept.itertuples(), strict=True):
        point = st.estimate(model, cluster, cfg(True).model_copy(update={"global_batch_size": gbs}))
        assert row.step_time_s == pytest.approx(point.step_time_s, rel=1e-9), gbs


def test_presets():
    for name in ("fsdp2", "fsdp2-compile", "llm-foundry"):
        assert load_stack(name).syncs_every_micro_batch(3), name
    deepspeed = load_stack("deepspeed")              # DeepSpeed: from ZeRO-2 up, at the boundary below
    assert [deepspeed.syncs_every_micro_batch(z) for z in range(4)] == [False, False, True, True]
    assert not load_stack("llm-foundry").syncs_every_micro_batch(0)   # Composer's DDP: no_sync
    for name in ("megatron-core", "megatron-lm", "reference", "ddp"):
        assert not any(load_stack(name).syncs_every_micro_batch(z) for z in range(4)), name


def test_deepspeed_zero1_syncs_once_zero2_every_micro_batch():
    model, cluster = st.load_model(MODEL), st.load_cluster("dgx-h100", nodes=4)

    def accum(zero):
        cfg = resolve_stack(st.TrainConfig(global_batch_size=256, micro_batch_size=1, seq_len=2048,
                                           precision="bf16", zero_stage=zero, stack="deepspeed"))
        prog = build_program(model, cluster, cfg)
        return [t for t in prog.stages[0].step_comm if t.phase == "accum"]
    assert not accum(1)
    (task,) = accum(2)
    assert task.count == 7 and task.kind == "reducescatter"
