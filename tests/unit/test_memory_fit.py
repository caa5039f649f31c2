"""The memory term of one-shot calibration (simtrain/calibrate/runs.py): planted scales come back,
bounds hold, and the term reaches estimates only through Calibration.config."""

from __future__ import annotations

import math

import pytest

import simtrain as st
from simtrain.calibrate.runs import (
    MEMORY_SCALE_BOUNDS,
    fit_memory_scale,
    predicted_peak,
    with_memory_scale,
)


@pytest.fixture(scope="module")
def setup():
    return st.load_model("llama2-7b"), st.load_cluster("dgx-a100-40gb", nodes=1)  # 8 × 40 GB


def _cfg(**kw):
    base = dict(global_batch_size=64, seq_len=2048, precision="bf16", optimizer="adamw", stack="megatron-core")
    return st.TrainConfig(**{**base, **kw})


def _records(model, cluster, planted: float, kind: str = "reserved"):
    """Runs on three layouts whose 'measured' peak is simtrain's own prediction with the planted scale;
    the first is predicted not to fit by the shipped model (micro-batch 8 on tp 8)."""
    out = []
    for i, cfg in enumerate((_cfg(tp=8, micro_batch_size=8), _cfg(tp=8, micro_batch_size=1),
                             _cfg(tp=4, pp=2, micro_batch_size=2))):
        probe = st.RunRecord(model=model, cluster=cluster, config=cfg, step_time_s=1.0, peak_memory_bytes=1.0,
                             peak_memory_kind=kind)
        out.append(st.RunRecord(model=model, cluster=cluster, config=cfg, step_time_s=1.0, name=f"r{i}",
                                peak_memory_bytes=predicted_peak(probe, planted), peak_memory_kind=kind))
    return out


@pytest.mark.parametrize("kind", ["reserved", "allocated"])
def test_a_planted_scale_comes_back_exactly(setup, kind):
    model, cluster = setup
    records = _records(model, cluster, 0.8, kind)
    assert not st.estimate(model, cluster, records[0].config).feasible     # shipped model: out of memory
    scale, unc = fit_memory_scale(records)
    assert scale == pytest.approx(0.8, rel=1e-9)
    assert unc == pytest.approx(0.01 / math.sqrt(sum((predicted_peak(r, 2.0) - predicted_peak(r, 1.0)) ** 2
                                                     / r.peak_memory_bytes ** 2 for r in records)) / 0.8)


def test_peaks_beyond_the_bounds_clip_with_unbounded_uncertainty(setup):
    model, cluster = setup
    records = _records(model, cluster, 3.0)
    scale, unc = fit_memory_scale(records)
    assert scale == MEMORY_SCALE_BOUNDS[1] and math.isinf(unc)


def test_no_peak_no_term(setup):
    model, cluster = setup
    rec = st.RunRecord(model=model, cluster=cluster, config=_cfg(tp=8, micro_batch_size=1), step_time_s=1.0)
    assert fit_memory_scale([rec]) is None


def test_the_scale_moves_only_the_transient_tensors(setup):
    model, cluster = setup
    cfg = _cfg(tp=8, micro_batch_size=1)
    one = st.estimate(model, cluster, cfg).memory
    half = st.estimate(model, cluster, with_memory_scale(cfg, cluster.device, 0.5)).memory
    assert (half.params_bytes, half.grads_bytes, half.optimizer_bytes) == (
        one.params_bytes, one.grads_bytes, one.optimizer_bytes)
    assert half.activations_bytes == pytest.approx(one.activations_bytes / 2)
    assert half.buffers_bytes < one.buffers_bytes
    # a config naming no stack runs the GPU default, and the term lands on that stack
    bare = st.TrainConfig(global_batch_size=64, seq_len=2048, tp=8, micro_batch_size=1)
    assert with_memory_scale(bare, cluster.device, 0.5).stack.name == "generic-gpu"


def test_calibration_carries_the_term_and_round_trips(setup, tmp_path):
    model, cluster = setup
    cal = st.calibrate_runs(_records(model, cluster, 0.8)[1:])
    assert cal.memory_scale == pytest.approx(0.8, rel=1e-9)
    again = st.load_calibration(cal.to_yaml(tmp_path / "c.yaml"))
    assert again.memory_scale == cal.memory_scale and again.config(_cfg()).stack.transient_memory_scale == \
        pytest.approx(0.8, rel=1e-9)
