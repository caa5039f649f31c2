"""The chapter's distributed-training examples (§8.6), one test each; slips noted (docs/chapter-disagreements.md)."""

import pytest

import simtrain as st
from simtrain.cost.memory import param_memory
from simtrain.cost.precision import regime
from simtrain.glossary import PipelineSchedule
from simtrain.parallel.schedule import bubble_fraction, pipeline_time_s, schedule_order


def test_gpt3_175b_weights_16bit_and_fp32():
    """§8.6.1 says 175B parameters need '350 GB ... in FP32'; §8.6.2 says '700 GB in FP32'.
    First principles: 174.6e9 × 4 B = 698 GB in fp32 and × 2 B = 349 GB in 16-bit — §8.6.2 is right,
    §8.6.1 has the precision wrong (350 GB is the 16-bit figure)."""
    model = st.load_model("gpt3-175b")
    ops = model.ops
    fp32 = param_memory(ops, regime("fp32"), "sgd", tp=1, sp=False, ep=1, dp=1, zero_stage=0).params_bytes
    bf16 = param_memory(ops, regime("bf16"), "sgd", tp=1, sp=False, ep=1, dp=1, zero_stage=0).params_bytes
    assert fp32 == pytest.approx(698.5e9, rel=1e-3) and bf16 == pytest.approx(349.2e9, rel=1e-3)


def test_activation_transfer_32x2048x2048_fp32():
    """§8.6.2: a [32, 2048, 2048] fp32 activation is 'approximately 512 MB': 536,870,912 B = 512 MiB
    exactly (537 MB). Over PCIe the chapter quotes '64 GB/s theoretical': that is Gen4 x16 counted in
    both directions; one direction carries 31.5 GB/s, so one transfer takes 17.0 ms, not 8.4 ms."""
    nbytes = 32 * 2048 * 2048 * 4
    assert nbytes == 512 * 2**20
    link = st.load_link("pcie-gen4-x16")
    assert link.per_direction_bytes_per_s == pytest.approx(31.5e9)
    assert nbytes / link.per_direction_bytes_per_s == pytest.approx(17.04e-3, rel=1e-3)


def test_eight_device_pipeline_warm_up():
    """§8.6.2: 'in an 8-device pipeline ... the eighth device remains idle for 7 steps'; the loss is
    (m−1)/b of the ideal time (the chapter writes 'percent': it is a fraction)."""
    p, m = 8, 32
    last = schedule_order(p - 1, p, m, PipelineSchedule.ONE_F_ONE_B)
    first = schedule_order(0, p, m, PipelineSchedule.ONE_F_ONE_B)
    assert first[: p - 1] == [("F", i) for i in range(p - 1)]  # 7 warm-up forwards on device 0
    assert last[:2] == [("F", 0), ("B", 0)]  # the last device starts only after 7 steps of fill
    step = pipeline_time_s([1.0] * p, m, PipelineSchedule.ONE_F_ONE_B)
    assert step == m + p - 1
    assert (step - m) / m == pytest.approx((p - 1) / m)
    assert bubble_fraction(p, m) == pytest.approx(7 / 39)


def test_interleaving_shrinks_the_bubble_v_fold():
    p, m, v = 8, 32, 4
    flat = pipeline_time_s([1.0] * p, m, PipelineSchedule.ONE_F_ONE_B) - m
    inter = pipeline_time_s([1.0] * p, m, PipelineSchedule.INTERLEAVED, v) - m
    assert inter == pytest.approx(flat / v)
