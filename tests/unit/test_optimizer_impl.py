"""``TrainConfig.optimizer_impl``: for-loop / foreach / fused optimizer steps, costed from PyTorch's op
sequences (simtrain/cost/optimizer.py), with hand-derived bytes and kernel counts.

tiny_mlp (tests/conftest.py): 40,000 fp32 parameters in 2 parameterised ops → 4 tensors (weight + bias
each, the program's count); invented device: 100 GB/s, launch overhead set to 1 µs below.
Adam for-loop (torch/optim/adam.py ``_single_tensor_adam``, per tensor):
  step += 1 (0), lerp_ m (read m, g; write m: 3), mul_ v (2), addcmul_ v (read v, g; write v: 3),
  sqrt v → t (2), t / c (2), add_ eps (2), addcdiv_ p (read p, m, t; write p: 4) = 18 passes, 8 kernels.
Fused: read p, g, m, v; write p, m, v = 7 passes. Every step also zeroes the gradients (1 pass).
"""

from __future__ import annotations

import pytest

import simtrain as st
from simtrain.cost.optimizer import impl_kernels, impl_passes, resolve_impl, traits
from simtrain.errors import SpecError
from tests.conftest import invented_device

PARAMS, TENSORS, BW, LAUNCH = 40_000, 4, 100e9, 1e-6


def _cfg(**kw):
    return st.TrainConfig(global_batch_size=1, micro_batch_size=1, precision="fp32", optimizer="adam",
                          grad_clipping=False, **kw)


def _optimizer_s(model, kind: str, **kw) -> float:
    eff = invented_device().efficiency.model_copy(update={"launch_overhead_s": LAUNCH})
    dev = invented_device(kind=kind, efficiency=eff.model_dump())
    return st.estimate(model, st.Cluster.single(dev), _cfg(**kw)).time_breakdown_s["optimizer"]


def test_passes_by_hand():
    assert impl_passes("adam", "for-loop", False) == 18
    assert impl_passes("adam", "foreach", False) == 18      # same ops as multi-tensor kernels
    assert impl_passes("adam", "fused", False) == 7
    assert impl_passes("adamw", "for-loop", False) == 20     # + param.mul_(1 - lr·wd)
    assert impl_passes("adamw", "fused", True) == 8          # + the 16-bit copy of the master weights
    assert impl_passes("sgd", "for-loop", False) == impl_passes("sgd", "fused", False) == 3
    assert impl_passes("momentum", "foreach", False) == 8    # buf.mul_ 2 + buf.add_ 3 + p.add_ 3
    assert impl_passes("rmsprop", "for-loop", False) == 13
    for kind in ("sgd", "momentum", "rmsprop", "adam", "adamw"):  # the legacy traits agree
        assert traits(kind).unfused_passes == impl_passes(kind, "for-loop", False)


def test_kernels_by_hand():
    assert impl_kernels("adam", "for-loop", 10, 1e4, "gpu") == 80
    assert impl_kernels("adam", "foreach", 10, 1e4, "gpu") == 8        # one launch per op
    assert impl_kernels("adam", "foreach", 10, 1e4, "cpu") == 80       # CPU foreach: per-tensor loop
    assert impl_kernels("adam", "fused", 100, 1e4, "gpu") == 3         # ceil(100 / 36), depth 4
    assert impl_kernels("adam", "fused", 100, 1e4, "cpu") == 100
    # momentum over 110 tensors: buf.mul_ (1 list, 110 a launch) 1 + buf.add_(g) (2 lists, 64 a
    # launch) 2 + p.add_(buf) (2 lists) 2
    assert impl_kernels("momentum", "foreach", 110, 1e4, "gpu") == 1 + 2 + 2
    big = 2 * 320 * 65536 + 1  # elements over two launches' chunk budget
    assert impl_kernels("sgd", "foreach", 2, big, "gpu") == 3


def test_default_is_what_pytorch_picks():
    assert resolve_impl(None, "gpu") == "foreach" and resolve_impl(None, "cpu") == "for-loop"
    assert resolve_impl(None, "cpu", fused_flag=True) == "fused"
    assert resolve_impl(None, "gpu", fused_flag=False) == "for-loop"
    assert resolve_impl("fused", "cpu", fused_flag=None) == "fused"


@pytest.mark.parametrize("kind,impl,expected_s", [
    ("gpu", "for-loop", (18 + 1) * 4 * PARAMS / BW + 8 * TENSORS * LAUNCH),
    ("gpu", "foreach", (18 + 1) * 4 * PARAMS / BW + 8 * LAUNCH),
    ("gpu", "fused", (7 + 1) * 4 * PARAMS / BW + 1 * LAUNCH),
    ("cpu", "foreach", (18 + 1) * 4 * PARAMS / BW + 8 * TENSORS * LAUNCH),
    ("cpu", "fused", (7 + 1) * 4 * PARAMS / BW + TENSORS * LAUNCH),
])
def test_estimated_optimizer_seconds_by_hand(tiny_mlp, kind, impl, expected_s):
    assert _optimizer_s(tiny_mlp, kind, optimizer_impl=impl) == pytest.approx(expected_s, rel=1e-9)


def test_none_follows_the_device_and_the_legacy_flag(tiny_mlp):
    for kind, picked in (("gpu", "foreach"), ("cpu", "for-loop")):
        assert _optimizer_s(tiny_mlp, kind) == _optimizer_s(tiny_mlp, kind, optimizer_impl=picked)
    # backward compatibility: fused_optimizer=True ≡ "fused", False ≡ "for-loop"
    assert _optimizer_s(tiny_mlp, "gpu", fused_optimizer=True) == _optimizer_s(tiny_mlp, "gpu", optimizer_impl="fused")
    assert _optimizer_s(tiny_mlp, "gpu", fused_optimizer=False) == \
        _optimizer_s(tiny_mlp, "gpu", optimizer_impl="for-loop")


def test_a_stack_that_sets_fused_optimizer_keeps_it(tiny_mlp):
    assert _optimizer_s(tiny_mlp, "gpu", stack="megatron-core") > 0
    eff = invented_device().efficiency.model_copy(update={"launch_overhead_s": LAUNCH})
    dev = invented_device(efficiency=eff.model_dump())
    from simtrain.cost.optimizer import impl_of_config
    from simtrain.specs.stack_resolve import resolve_stack
    cfg = resolve_stack(_cfg(stack="megatron-core"))
    assert impl_of_config(cfg, dev.kind) == "fused"
    assert impl_of_config(resolve_stack(_cfg(stack="megatron-core", optimizer_impl="foreach")), "gpu") == "foreach"


def test_contradiction_and_bad_value_are_errors():
    with pytest.raises((SpecError, ValueError), match="optimizer_impl"):
        _cfg(optimizer_impl="foreach", fused_optimizer=True)
    with pytest.raises((SpecError, ValueError), match="optimizer_impl"):
        _cfg(optimizer_impl="vectorised")
    assert _cfg(optimizer_impl="fused", fused_optimizer=True).optimizer_impl == "fused"
