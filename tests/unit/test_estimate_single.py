"""Single-device estimate on a hand-built two-layer MLP and an invented device (tests/conftest.py).

Device: 1e12 FLOP/s fp32, 1e11 B/s, ideal efficiencies, no launch overhead. Micro-batch 10, fp32, SGD.
Per op and phase, t = max(flops / 1e12, bytes / 1e11):
  fc0 (100→200): fw flops 2·100·200·10 = 4e5 → 0.4 us; bytes (100 + 200)·10·4 + 20000·4 = 92,000 → 0.92 us.
      agrad and wgrad move the same 92,000 B → 0.92 us each.           fc0 total 2.76 us
  relu (200):  fw 2·200·10·4 = 16,000 B → 0.16 us; agrad 3·200·10·4 = 24,000 B → 0.24 us.  0.40 us
  fc1 (200→100): symmetric to fc0.                                      2.76 us
  forward + backward = 5.92 us
  SGD fused: read p, g, write p = 3 passes; global-norm gradient clipping: read g for the norm, read
  and write g to scale = 3 passes; zero g for the next step = 1 pass: 7 passes × 4 B × 40,000 params
  = 1,120,000 B → 11.2 us
  step = 17.12 us
"""

import math

import pytest

import simtrain as st
from simtrain.estimator import estimate


def cfg(**kw):
    # the reference stack: the hand derivations are of the kernels alone (a GPU's default adds idle gaps)
    base = dict(global_batch_size=10, micro_batch_size=10, precision="fp32", optimizer="sgd", stack="reference")
    base.update(kw)
    return st.TrainConfig(**base)


def test_step_time_hand_derived(tiny_mlp, single):
    r = estimate(tiny_mlp, single, cfg())
    assert r.feasible, r.reasons
    b = r.time_breakdown_s
    assert b["compute"] == pytest.approx(5.92e-6, rel=1e-9)
    assert b["optimizer"] == pytest.approx(11.2e-6, rel=1e-9)
    assert b["recompute"] == b["comm_exposed"] == b["pipeline_bubble"] == b["data_stall"] == 0
    assert r.step_time_s == pytest.approx(17.12e-6, rel=1e-9)
    # model FLOPs (matrix ops only: PaLM / Megatron / FlopCounterMode): per sample 3·2·100·200 twice
    # = 240,000; × 10 samples. The relu's 200 fw + 200 agrad per sample are vector FLOPs, apart.
    assert r.model_flops_per_step == pytest.approx(2_400_000)
    assert r.vector_flops_per_step == pytest.approx(4_000)
    assert r.hardware_flops_per_step == pytest.approx(2_400_000)
    assert r.mfu == pytest.approx(2_400_000 / (17.12e-6 * 1e12), rel=1e-9)
    assert r.samples_per_s == pytest.approx(10 / 17.12e-6)
    assert r.bottleneck == "memory_bandwidth"


def test_memory_hand_derived(tiny_mlp, single):
    m = estimate(tiny_mlp, single, cfg()).memory
    # weights 40,000 × 4 B; grads the same; SGD keeps no state in fp32
    assert (m.params_bytes, m.grads_bytes, m.optimizer_bytes) == (160_000, 160_000, 0)
    # saved for backward: fc0 input 100 + relu output 200 + fc1 input 200 elements × 10 × 4 B
    assert m.activations_bytes == 20_000
    # transient: largest op output + input gradient = relu (200 + 200) × 10 × 4 B
    assert m.buffers_bytes == 16_000
    assert m.overhead_bytes == pytest.approx(0.05 * 10e9)
    assert m.fits and m.total_bytes == pytest.approx(356_000 + 5e8)


def test_mixed_precision_adam_memory(tiny_mlp, single):
    m = estimate(tiny_mlp, single, cfg(precision="bf16", optimizer="adam")).memory
    # ZeRO §3.1: 2 B weights + 2 B grads + (4 B master + 4 B m + 4 B v) per parameter
    assert (m.params_bytes, m.grads_bytes, m.optimizer_bytes) == (80_000, 80_000, 480_000)
    assert m.activations_bytes == 10_000  # 16-bit activations


@pytest.mark.parametrize("opt,states", [("sgd", 0), ("momentum", 1), ("rmsprop", 1), ("adam", 2), ("adamw", 2)])
def test_optimizer_state_multiples(tiny_mlp, single, opt, states):
    """Chapter §8.3.3: memory of SGD / momentum / RMSprop / Adam = 1× / 2× / 2× / 3× the parameters."""
    m = estimate(tiny_mlp, single, cfg(optimizer=opt)).memory
    assert (m.params_bytes + m.optimizer_bytes) / m.params_bytes == 1 + states


def test_gradient_accumulation_runs_microbatches(tiny_mlp, single):
    one = estimate(tiny_mlp, single, cfg())
    four = estimate(tiny_mlp, single, cfg(global_batch_size=40))
    assert four.layout["micro_batches"] == 4
    assert four.time_breakdown_s["compute"] == pytest.approx(4 * one.time_breakdown_s["compute"])
    assert four.time_breakdown_s["optimizer"] == pytest.approx(one.time_breakdown_s["optimizer"])


def test_unfused_optimizer_moves_more_bytes(tiny_mlp, single):
    fused = estimate(tiny_mlp, single, cfg(optimizer="adam", fused_optimizer=True)).time_breakdown_s["optimizer"]
    unfused = estimate(tiny_mlp, single, cfg(optimizer="adam", fused_optimizer=False)).time_breakdown_s["optimizer"]
    # Adam 7 fused / 18 for-loop passes (cost/optimizer.py), + 3 clipping + 1 zeroing passes either way
    assert unfused / fused == pytest.approx((18 + 4) / (7 + 4))


def test_without_gradient_clipping_the_step_is_the_optimizer_alone(tiny_mlp, single):
    r = estimate(tiny_mlp, single, cfg(grad_clipping=False))
    assert r.time_breakdown_s["optimizer"] == pytest.approx(4 * 4 * 40_000 / 1e11, rel=1e-9)  # 3 + 1 zeroing


def test_frozen_layers_have_no_grads_or_state(tiny_mlp, single):
    m = estimate(tiny_mlp, single, cfg(optimizer="adam", frozen_prefixes=["layers.0"])).memory
    assert m.grads_bytes == 20_000 * 4 and m.optimizer_bytes == 20_000 * 8


def test_out_of_memory_names_the_term(tiny_mlp):
    from tests.conftest import invented_device
    small = st.Cluster.single(invented_device(memory=[{"name": "hbm", "level": "hbm",
        "capacity_bytes": {"value": 1e5, "source": "test"}, "bandwidth_bytes_per_s": {"value": 1e11, "source": "test"}}]))
    r = estimate(tiny_mlp, small, cfg())
    assert not r.feasible
    assert "out of memory" in r.reasons[0] and "params" in r.reasons[0]
    assert math.isfinite(r.step_time_s)


def test_infeasible_layout_is_a_report_not_an_exception(tiny_mlp, single):
    r = estimate(tiny_mlp, single, cfg(tp=2))
    assert not r.feasible
    assert "not a multiple of tp × pp × cp" in r.reasons[0]


def test_time_to_train_cost_energy(tiny_mlp, single):
    r = estimate(tiny_mlp, single, cfg())
    t = r.time_to_train(samples=1e6)
    assert t == pytest.approx(1e5 * 17.12e-6)
    assert r.cost_dollars(duration_s=3600) == pytest.approx(1.0)
    # busy = compute + optimizer = whole step → TDP
    assert r.energy_kwh(duration_s=3600) == pytest.approx(0.1)


def test_eval_amortised(tiny_mlp, single):
    r = estimate(tiny_mlp, single, cfg(eval={"every_steps": 10, "batches": 2}))
    # forward only: fc0 0.92 + relu 0.16 + fc1 0.92 = 2.0 us per batch, 2 batches every 10 steps
    assert r.eval_time_per_step_s == pytest.approx(2 * 2.0e-6 / 10)
