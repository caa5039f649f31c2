"""The data-parallel reduction's dtype (``Stack.grad_reduce_fp32``): True reduces in fp32 in every
mixed-precision regime; ``"bf16"`` (Megatron-LM / Megatron-Core: ``--bf16`` forces
``accumulate_allreduce_grads_in_fp32``) only where the 16-bit dtype is bf16, fp16 keeping fp16 on the wire."""

from __future__ import annotations

import pytest

import simtrain as st
from simtrain.cost.precision import regime
from simtrain.errors import SpecError
from simtrain.parallel.fsdp_comm import reduced_grad_bytes


def _bytes(mode, precision: str) -> float:
    stack = st.load_stack("reference").with_overrides(grad_reduce_fp32=mode)
    return reduced_grad_bytes(stack, regime(precision))


@pytest.mark.parametrize(("mode", "precision", "expected"), [
    (True, "bf16", 4.0), (True, "fp16", 4.0), (True, "fp8", 4.0),
    ("bf16", "bf16", 4.0), ("bf16", "fp8", 4.0), ("bf16", "fp16", 2.0),
    (False, "bf16", 2.0), (False, "fp16", 2.0),
])
def test_bytes_per_gradient_element_on_the_wire(mode, precision, expected):
    assert _bytes(mode, precision) == expected


@pytest.mark.parametrize("mode", [True, "bf16", False])
def test_fp32_training_reduces_its_own_fp32_gradients(mode):
    assert _bytes(mode, "fp32") == 4.0


def test_megatron_presets_follow_megatrons_bf16_rule():
    for name in ("megatron-lm", "megatron-core"):
        assert st.load_stack(name).grad_reduce_fp32 == "bf16"


def _dp_comm_s(precision: str) -> float:
    """A 2-rank DDP step of GPT-2 on a DGX A100 with the megatron-lm preset, the
    all-reduce after the backward (not hidden): its exposed communication."""
    cfg = st.TrainConfig(global_batch_size=4, micro_batch_size=2, seq_len=256, precision=precision, dp=2,
                         stack="megatron-lm")
    cluster = st.load_cluster("dgx-a100-80gb")
    node = cluster.node.model_copy(update={"devices_count": 2})
    cluster = cluster.model_copy(update={"node": node, "nodes_count": 1})
    return st.estimate(st.load_model("gpt2"), cluster, cfg).time_breakdown_s["comm_exposed"]


def test_megatron_lm_bf16_all_reduce_moves_twice_fp16s_bytes():
    # same model and layout: the bf16 run's gradients travel in fp32, the fp16 run's in fp16, so the
    # exposed all-reduce of the bf16 run is the longer (bandwidth-bound: close to twice)
    ratio = _dp_comm_s("bf16") / _dp_comm_s("fp16")
    assert 1.5 < ratio <= 2.0


def test_an_unknown_mode_names_the_field():
    with pytest.raises((SpecError, ValueError), match="grad_reduce_fp32"):
        st.load_stack("reference").with_overrides(grad_reduce_fp32="fp16")


def test_a_bad_mode_in_a_config_gets_one_message_with_the_valid_values():
    with pytest.raises(SpecError, match=r"stack\.grad_reduce_fp32: .*true, false or 'bf16'"):
        st.TrainConfig(global_batch_size=8, stack={"preset": "megatron-core", "grad_reduce_fp32": "fp32"})
