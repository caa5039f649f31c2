"""validation/lab/attribution.py: which fitted quantities carry two calibrations' difference."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import simtrain as st
from simtrain.glossary import OpClass
from simtrain.specs.hardware import ComputeCurve, Efficiency
from simtrain.specs.library import load_device
from validation.lab.attribution import attribution, attribution_lines, swaps


def _eff(**extra) -> Efficiency:
    base = {"compute": {OpClass.MATMUL: ComputeCurve(peak_fraction=0.5, half_flops=1e6),
                        OpClass.CONV: ComputeCurve(peak_fraction=0.4, half_flops=1e6)},
            "launch_overhead_s": 1e-5, "source": "test"}
    return Efficiency(**(base | extra))


def test_swaps_name_each_differing_quantity_and_give_a_that_one_of_b():
    """B differs from A in its conv curve, its launch overhead and a kind curve only it has; A has a
    kind curve B lacks. Four swaps, each changing that quantity alone; the source is not costed."""
    slow_conv = ComputeCurve(peak_fraction=0.3, half_flops=1e6)
    pool = ComputeCurve(peak_fraction=0.1, half_flops=10.0)
    a = _eff(kind_compute={"layernorm": pool})
    b = _eff(compute={OpClass.MATMUL: ComputeCurve(peak_fraction=0.5, half_flops=1e6), OpClass.CONV: slow_conv},
             launch_overhead_s=2e-5, kind_compute={"maxpool": pool}, source="other")
    got = swaps(a, b)
    assert set(got) == {"compute[conv]", "launch_overhead_s", "kind_compute[layernorm]", "kind_compute[maxpool]"}
    conv = a.model_copy(update=got["compute[conv]"])
    assert conv.compute[OpClass.CONV] == slow_conv and conv.compute[OpClass.MATMUL] == a.compute[OpClass.MATMUL]
    assert conv.launch_overhead_s == 1e-5
    assert a.model_copy(update=got["launch_overhead_s"]).launch_overhead_s == 2e-5
    assert a.model_copy(update=got["kind_compute[layernorm]"]).kind_compute == {}
    assert a.model_copy(update=got["kind_compute[maxpool]"]).kind_compute == {"layernorm": pool, "maxpool": pool}
    assert swaps(a, a) == {}


@pytest.fixture(scope="module")
def tiny_mlp():
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
    model = st.Model.from_torch(module, (torch.randn(16, 64),), lambda y: y.square().mean(), name="tiny")
    return [(SimpleNamespace(case="tiny/b16", batch=16, optimizer="sgd"), model)]


def test_a_lone_difference_carries_the_whole_and_an_unused_one_is_left_out(tiny_mlp):
    """B's launch overhead ×10 and a max-pool curve an MLP never uses: the launch swap alone moves the
    prediction exactly as B as a whole does; the pool curve moves nothing and is not listed."""
    dev = load_device("h200-sxm-141gb")
    ea = dev.efficiency
    eb = ea.model_copy(update={"launch_overhead_s": 10 * ea.launch_overhead_s,
                               "kind_compute": {**ea.kind_compute, "maxpool": ComputeCurve(peak_fraction=0.01,
                                                                                           half_flops=1.0)}})
    got = attribution(tiny_mlp, dev, dev.model_copy(update={"efficiency": eb}))
    assert got["cases"] == ["tiny/b16"]
    assert got["whole_pct"][0] > 1.0
    assert list(got["swaps_pct"]) == ["launch_overhead_s"]
    assert got["swaps_pct"]["launch_overhead_s"][0] == pytest.approx(got["whole_pct"][0], rel=1e-9)
    text = "\n".join(attribution_lines(got))
    assert "| `launch_overhead_s` |" in text and "| tiny |" in text
