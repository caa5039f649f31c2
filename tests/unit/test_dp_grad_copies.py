"""The data-parallel wrapper's gradient copies (``Stack.dp_grad_copy_passes``): DDP copies each
gradient into its bucket and back, 4 gradient-sized passes per step at the cold rate, derived by hand."""

from __future__ import annotations

import pytest

import simtrain as st
from simtrain.cost.compute import device_efficiency
from simtrain.errors import SpecError

COLD_BYTES_PER_S = 1e9


def _cluster(devices: int):
    """``devices`` A100s of a DGX node whose step-cold rate is 1 GB/s (the rate the copies run at)."""
    dgx = st.load_cluster("dgx-a100-80gb")
    base = dgx.device
    eff = device_efficiency(base).model_copy(update={"step_cold_bytes_per_s": COLD_BYTES_PER_S})
    node = dgx.node.model_copy(update={"device": base.model_copy(update={"efficiency": eff}),
                                       "devices_count": devices})
    return dgx.model_copy(update={"node": node, "nodes_count": 1})


def _optimizer_s(dp: int, passes: float, precision: str = "fp32") -> float:
    stack = st.load_stack("reference").with_overrides(dp_grad_copy_passes=passes)
    cfg = st.TrainConfig(global_batch_size=8 * dp, micro_batch_size=8, dp=dp, precision=precision, optimizer="sgd",
                         zero_grad_to_none=True, grad_clipping=False, stack=stack)
    return st.estimate(st.load_model("mlp-mnist"), _cluster(dp), cfg).time_breakdown_s["optimizer"]


def test_four_passes_over_the_fp32_gradients_at_the_cold_rate():
    params = st.load_model("mlp-mnist").param_count
    # copy in (read the gradient, write the bucket) + copy back (read the bucket, write the gradient):
    # 4 passes × 4 B × every parameter, at 1 GB/s
    extra_s = 4 * 4.0 * params / COLD_BYTES_PER_S
    assert _optimizer_s(2, 4.0) - _optimizer_s(2, 0.0) == pytest.approx(extra_s, rel=1e-9)
    # in place scaling only (gradient_as_bucket_view=True): half of it
    assert _optimizer_s(2, 2.0) - _optimizer_s(2, 0.0) == pytest.approx(extra_s / 2, rel=1e-9)


def test_bf16_gradients_move_half_the_bytes():
    params = st.load_model("mlp-mnist").param_count
    extra_s = 4 * 2.0 * params / COLD_BYTES_PER_S
    assert _optimizer_s(2, 4.0, "bf16") - _optimizer_s(2, 0.0, "bf16") == pytest.approx(extra_s, rel=1e-9)


def test_one_rank_copies_nothing():
    assert _optimizer_s(1, 4.0) == _optimizer_s(1, 0.0)


def test_the_ddp_preset_copies_and_the_reference_stack_does_not():
    assert st.load_stack("ddp").dp_grad_copy_passes == 4
    assert st.load_stack("reference").dp_grad_copy_passes == 0


@pytest.mark.parametrize("bad", [-1.0, 17.0])
def test_out_of_range_passes_name_the_field(bad):
    with pytest.raises((SpecError, ValueError), match="dp_grad_copy_passes"):
        st.load_stack("reference").with_overrides(dp_grad_copy_passes=bad)
