"""st.calibrate_runs takes any run that really ran: one predicted not to fit in memory (fitted all
the same, with a warning and its memory residual), on any node count (fitted on one size, applied
to another); only a layout that cannot be built at all is refused, naming the record."""

from __future__ import annotations

import math

import pytest

import simtrain as st
from simtrain.calibrate.runs import scaled_cluster

GiB = 2**30


@pytest.fixture(scope="module")
def llama():
    return st.load_model("llama2-7b")


@pytest.fixture(scope="module")
def gpt2():
    return st.load_model("gpt2")


@pytest.fixture(scope="module")
def a100():
    return st.load_cluster("dgx-a100-40gb", nodes=1)  # 8 × 40 GB


def _cfg(**kw):
    base = dict(global_batch_size=32, seq_len=2048, precision="bf16", recompute="none")
    return st.TrainConfig(**{**base, **kw})


# llama2-7b, tp=8, 8 sequences of 2048 per micro-batch, no recomputation: ~42 GiB reserved per GPU
OOM_CFG = _cfg(tp=8, micro_batch_size=8)


def _record(model, cluster, cfg, truth, name, **kw):
    """A run whose 'measured' step time is simtrain's own prediction on the truly-scaled cluster."""
    t = st.estimate(model, scaled_cluster(cluster, truth), cfg).step_time_s
    return st.RunRecord(model=model, cluster=cluster, config=cfg, step_time_s=t, name=name, **kw)


def test_the_oom_case_is_really_predicted_infeasible_for_memory_only(llama, a100):
    r = st.estimate(llama, a100, OOM_CFG)
    assert not r.feasible
    assert math.isfinite(r.step_time_s) and r.step_time_s > 0
    assert r.memory.reserved_bytes > r.memory.capacity_bytes
    assert len(r.reasons) == 1 and r.reasons[0].startswith("out of memory")


def test_one_factor_recovered_from_a_run_predicted_not_to_fit(llama, a100):
    rec = _record(llama, a100, OOM_CFG, {"compute": 0.8}, "oom")
    cal = st.calibrate_runs([rec])
    assert list(cal.factors) == ["compute"]
    assert cal.factors["compute"] == pytest.approx(0.8, rel=0.02)
    assert len(cal.warnings) == 1 and cal.warnings[0].startswith("oom: ")


def test_two_factors_recovered_from_runs_of_several_shapes_one_over_memory(llama, gpt2, a100):
    truth = {"compute": 0.8, "communication": 0.7}
    two_nodes = st.load_cluster("dgx-a100-40gb", nodes=2)
    recs = [_record(llama, a100, OOM_CFG, truth, "llama tp8 mb8 (oom)"),
            _record(llama, a100, _cfg(tp=4, pp=2, micro_batch_size=4), truth, "llama tp4 pp2"),
            _record(gpt2, two_nodes, _cfg(tp=1, micro_batch_size=2, seq_len=1024), truth, "gpt2 dp16"),
            _record(gpt2, two_nodes, _cfg(tp=4, micro_batch_size=2, seq_len=1024, global_batch_size=64), truth,
                    "gpt2 tp4 dp4")]
    cal = st.calibrate_runs(recs)  # four runs: two factors, chosen automatically
    assert list(cal.factors) == ["compute", "communication"]
    assert cal.factors["compute"] == pytest.approx(0.8, rel=0.02)
    assert cal.factors["communication"] == pytest.approx(0.7, rel=0.02)
    assert all(abs(r.error) < 0.01 for r in cal.records)
    assert all(r.loo_predicted_s is not None for r in cal.records)  # the OOM run is predicted left out too
    assert [w.split(":")[0] for w in cal.warnings] == ["llama tp8 mb8 (oom)"]
    assert [r.predicted_overflow for r in cal.records] == [True, False, False, False]


def test_a_layout_that_cannot_be_built_is_refused_naming_the_record(llama, a100):
    bad = st.RunRecord(model=llama, cluster=a100, config=_cfg(tp=3, micro_batch_size=1), step_time_s=1.0,
                       name="tp3 run")  # 8 devices are no multiple of tp=3; 32 heads do not split in 3
    assert not math.isfinite(st.estimate(llama, a100, bad.config).step_time_s)
    good = _record(llama, a100, OOM_CFG, {"compute": 0.8}, "oom run")
    with pytest.raises(st.SpecError) as err:
        st.calibrate_runs([good, bad])
    text = str(err.value)
    assert "tp3 run" in text and "oom run" not in text
    assert "predicted infeasible" in text and "tp=3" in text and "config" in err.value.fields


def test_warning_and_memory_residual_appear(llama, a100):
    r = st.estimate(llama, a100, OOM_CFG)
    measured = 36 * GiB
    rec = _record(llama, a100, OOM_CFG, {"compute": 0.8}, "oom", peak_memory_bytes=measured)
    cal = st.calibrate_runs([rec])
    fit = cal.records[0]
    # one peak fits the memory term exactly (within its bounds): the fitted prediction is the peak
    assert cal.memory_scale is not None and 0.5 < cal.memory_scale < 1.0
    assert fit.predicted_memory_bytes == pytest.approx(measured) and fit.memory_error == pytest.approx(0, abs=1e-9)
    assert fit.memory_capacity_bytes == pytest.approx(r.memory.capacity_bytes)
    assert fit.measured_memory_bytes == measured and not fit.predicted_overflow
    # the warning is the shipped model's verdict: it names the record, its predicted reserved vs
    # usable, and the measured peak with the shipped model's residual
    reserved, usable = f"{r.memory.reserved_bytes / GiB:.1f} GiB", f"{r.memory.capacity_bytes / GiB:.1f} GiB"
    (warning,) = cal.warnings
    assert warning.startswith("oom: ") and reserved in warning and usable in warning and "36.0 GiB" in warning
    assert f"predicted {100 * (r.memory.reserved_bytes / measured - 1):+.1f} %" in warning
    text = cal.summary()
    assert f"warning: {warning}" in text and "memory (transient)" in text
    assert f"memory: predicted {measured / GiB:.1f} GiB reserved" in text and "memory +0.0 %" in text


def test_without_a_peak_the_memory_numbers_are_the_shipped_models(llama, a100):
    r = st.estimate(llama, a100, OOM_CFG)
    cal = st.calibrate_runs([_record(llama, a100, OOM_CFG, {"compute": 0.8}, "oom")])
    fit = cal.records[0]
    assert cal.memory_scale is None and cal.config(OOM_CFG) is OOM_CFG
    assert fit.predicted_memory_bytes == pytest.approx(r.memory.reserved_bytes) and fit.predicted_overflow
    reserved, usable = f"{r.memory.reserved_bytes / GiB:.1f} GiB", f"{r.memory.capacity_bytes / GiB:.1f} GiB"
    allocated = f"{r.memory.total_bytes / GiB:.1f} GiB"
    text = cal.summary()
    assert f"memory: predicted {reserved} reserved ({allocated} allocated) of {usable} usable" in text
    assert "predicted not to fit" in text and "memory (transient)" not in text


def test_a_run_that_fits_has_a_memory_residual_and_no_warning(llama, a100):
    cfg = _cfg(tp=8, micro_batch_size=1)
    r = st.estimate(llama, a100, cfg)
    assert r.feasible
    rec = _record(llama, a100, cfg, {"compute": 0.8}, "fits", peak_memory_bytes=r.memory.reserved_bytes * 1.05)
    cal = st.calibrate_runs([rec])
    assert cal.warnings == ()
    assert cal.records[0].memory_error == pytest.approx(0, abs=1e-9)    # the memory term takes the 5 %
    assert cal.memory_scale > 1.0
    assert not cal.records[0].predicted_overflow
    assert "warning" not in cal.summary()


def test_an_allocated_peak_is_compared_with_the_allocated_prediction(llama, a100):
    """torch.cuda.max_memory_allocated logged: the residual is against the tensors (total_bytes), not the
    reserved figure with the allocator's cache and the workspaces."""
    cfg = _cfg(tp=8, micro_batch_size=1, stack="megatron-core")   # a stack with an allocator model
    r = st.estimate(llama, a100, cfg)
    measured = r.memory.total_bytes * 0.97
    rec = _record(llama, a100, cfg, {"compute": 0.8}, "alloc", peak_memory_bytes=measured,
                  peak_memory_kind="allocated")
    cal = st.calibrate_runs([rec])
    fit = cal.records[0]
    assert fit.memory_kind == "allocated"
    # the memory term is fitted on the allocated prediction: it equals the peak, the reserved one stays
    # above it (the allocator's reserve and the workspaces), and the transient scale is below 1
    assert fit.predicted_allocated_bytes == pytest.approx(measured) and fit.memory_error == pytest.approx(0, abs=1e-9)
    assert fit.predicted_memory_bytes > measured and cal.memory_scale < 1.0
    m = st.estimate(llama, a100, cal.config(cfg, a100.device)).memory    # cal.config applies the term
    assert m.total_bytes == pytest.approx(measured)
    with pytest.raises(st.SpecError, match="peak_memory_kind"):
        _record(llama, a100, cfg, {"compute": 0.8}, "x", peak_memory_bytes=1.0, peak_memory_kind="active")


def test_new_fields_round_trip_and_old_files_still_load(tmp_path, llama, a100):
    rec = _record(llama, a100, OOM_CFG, {"compute": 0.8}, "oom", peak_memory_bytes=36 * GiB)
    cal = st.calibrate_runs([rec])
    again = st.load_calibration(cal.to_yaml(tmp_path / "cal.yaml"))
    assert again == cal
    assert again.warnings == cal.warnings and again.records[0].memory_error == cal.records[0].memory_error
    old = tmp_path / "old.yaml"  # written before warnings / memory_capacity_bytes existed
    old.write_text("spec: calibration\nfactors: {compute: 0.9}\nuncertainty: {compute: 0.02}\n"
                   "records:\n- {name: a, measured_s: 1.0, predicted_s: 1.01, loo_predicted_s: null,\n"
                   "   measured_memory_bytes: null, predicted_memory_bytes: 1.0e+10}\n")
    loaded = st.load_calibration(old)
    assert loaded.warnings == () and loaded.records[0].memory_capacity_bytes is None
    assert loaded.records[0].memory_error is None and not loaded.records[0].predicted_overflow
    assert "memory: predicted 9.3 GiB reserved" in loaded.summary()


@pytest.mark.parametrize("fit_nodes, apply_nodes", [(1, (8, 64)), (64, (1, 2))])
def test_fitted_on_one_node_count_applies_to_another(gpt2, fit_nodes, apply_nodes):
    """The factors belong to the device's efficiency profile, not to a cluster size: a calibration
    fitted on one node count predicts another exactly as the truly-scaled cluster does."""
    truth = {"compute": 0.8}

    def cfg(cluster):
        return _cfg(tp=2, micro_batch_size=2, seq_len=1024, global_batch_size=2 * cluster.devices_count)
    fit_on = st.load_cluster("dgx-a100-40gb", nodes=fit_nodes)
    cal = st.calibrate_runs([_record(gpt2, fit_on, cfg(fit_on), truth, f"{fit_nodes} nodes")])
    assert cal.factors["compute"] == pytest.approx(0.8, rel=0.02)
    for n in apply_nodes:
        other = st.load_cluster("dgx-a100-40gb", nodes=n)
        applied = cal.apply(other)
        assert applied.nodes_count == n and applied.devices_count == 8 * n
        assert applied.network == other.network
        got = st.estimate(gpt2, applied, cfg(other))
        want = st.estimate(gpt2, scaled_cluster(other, truth), cfg(other))
        assert got.feasible and got.step_time_s == pytest.approx(want.step_time_s, rel=1e-6), n
