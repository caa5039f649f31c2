"""st.RunRecord / st.calibrate_runs / st.Calibration: recovery of known factors from synthetic runs,
transfer across sizes and layouts, uncertainty, leave-one-out, files and bad input."""

from __future__ import annotations

import math

import pytest

import simtrain as st
from simtrain.calibrate.runs import RUN_NOISE, factors_for, scaled_cluster


@pytest.fixture(scope="module")
def node():
    return st.load_cluster("dgx-h100", nodes=2)


def _cfg(**kw):
    base = dict(global_batch_size=32, micro_batch_size=1, seq_len=1024, precision="bf16", stack="megatron-core")
    return st.TrainConfig(**{**base, **kw})


def _synthetic(truth, node, cases):
    """Records whose 'measured' step time is simtrain's own prediction on the truly-scaled cluster."""
    true_cluster = scaled_cluster(node, truth)
    out = []
    for name, cfg in cases:
        model = st.load_model(name)
        t = st.estimate(model, true_cluster, cfg).step_time_s
        out.append(st.RunRecord(model=model, cluster=node, config=cfg, step_time_s=t, name=f"{name} {cfg.tp}"))
    return out


CASES = [("gpt2-medium", _cfg(tp=2)), ("gpt2-large", _cfg(tp=4)), ("gpt2-xl", _cfg(tp=1, pp=2)),
         ("gpt2", _cfg(tp=1)), ("gpt2-large", _cfg(tp=2, pp=4, micro_batch_size=2))]


def test_one_run_fits_one_factor_and_recovers_it(node):
    recs = _synthetic({"compute": 0.8}, node, CASES[:1])
    cal = st.calibrate_runs(recs)
    assert list(cal.factors) == ["compute"]
    assert cal.factors["compute"] == pytest.approx(0.8, rel=2e-3)
    assert cal.loo_error is None
    # one run: the uncertainty is the run-to-run noise over the step's sensitivity to the factor (≤ 1)
    assert RUN_NOISE <= cal.uncertainty["compute"] < 5 * RUN_NOISE


def test_one_shot_factor_transfers_to_other_sizes_and_layouts(node):
    recs = _synthetic({"compute": 0.85}, node, CASES)
    cal = st.calibrate_runs(recs[:1])
    for rec in recs[1:]:
        pred = st.estimate(rec.model, cal.apply(rec.cluster), rec.config).step_time_s
        assert pred == pytest.approx(rec.step_time_s, rel=0.01), rec.label


def test_two_factors_recovered_from_enough_runs(node):
    truth = {"compute": 0.8, "communication": 0.7}  # 0.7: unclipped (fractions stay ≤ 1)
    recs = _synthetic(truth, node, CASES)
    cal = st.calibrate_runs(recs, factors=["compute", "communication"])
    assert cal.factors["compute"] == pytest.approx(0.8, rel=0.02)
    assert cal.factors["communication"] == pytest.approx(0.7, rel=0.05)
    assert cal.loo_error is not None and cal.loo_error < 0.02
    assert all(abs(r.error) < 0.01 for r in cal.records)


def test_how_many_factors_the_runs_support():
    assert [factors_for(n) for n in (1, 2, 3, 4, 6, 8, 20)] == [1, 1, 1, 2, 3, 4, 4]


def test_a_factor_the_runs_cannot_see_is_not_fitted():
    single = st.Cluster.single(st.load_device("h100-sxm5-80gb"))
    cfg = st.TrainConfig(global_batch_size=4, micro_batch_size=1, seq_len=512, precision="bf16")
    model = st.load_model("gpt2")
    t = st.estimate(model, single, cfg).step_time_s
    recs = [st.RunRecord(model=model, cluster=single, config=cfg.model_copy(update={"global_batch_size": g}),
                         step_time_s=t * g / 4) for g in (4, 8, 12, 16)]
    cal = st.calibrate_runs(recs)  # 4 runs support 2 factors, but one device has no communication
    assert "communication" not in cal.factors


def test_apply_clips_fractions_at_the_datasheet(node):
    cal = st.Calibration(factors={"compute": 1.6})
    eff = cal.apply(node).device.efficiency
    assert eff.compute["matmul"].peak_fraction <= 1.0
    assert all(k.fw_peak_fraction <= 1.0 for k in eff.attention_kernels.values())


def test_yaml_round_trip(tmp_path, node):
    recs = _synthetic({"compute": 0.9}, node, CASES[:1])
    cal = st.calibrate_runs(recs)
    path = cal.to_yaml(tmp_path / "cal.yaml")
    again = st.load_calibration(path)
    assert again.factors == cal.factors and again.stack == "megatron-core"
    assert again.apply(node).device.efficiency == cal.apply(node).device.efficiency


@pytest.mark.parametrize("text, field", [
    ("spec: calibration\nfactors: {compute: 9.0}\n", "factors"),
    ("spec: calibration\nfactors: {speed: 1.0}\n", "factors"),
    ("spec: device\nfactors: {}\n", "spec"),
    ("spec: calibration\nfactors: {compute: 0.9}\nsurprise: 1\n", "surprise"),
])
def test_bad_calibration_files_name_the_field(tmp_path, text, field):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(st.SpecError) as err:
        st.load_calibration(path)
    assert field in str(err.value) and str(path) in str(err.value)


def test_a_directory_is_not_a_calibration(tmp_path):
    with pytest.raises(st.SpecError, match="regular file"):
        st.load_calibration(tmp_path)


@pytest.mark.parametrize("kw", [dict(step_time_s=-1.0), dict(step_time_s=float("nan")), dict(step_time_s=True),
                                dict(model="gpt2"), dict(peak_memory_bytes=0)])
def test_bad_run_records_are_refused(node, kw):
    base = dict(model=st.load_model("gpt2"), cluster=node, config=_cfg(), step_time_s=1.0)
    with pytest.raises(st.SpecError):
        st.RunRecord(**{**base, **kw})


def test_summary_reads(node):
    recs = _synthetic({"compute": 0.9}, node, CASES[:2])
    text = st.calibrate_runs(recs).summary()
    assert "compute" in text and "megatron-core" in text and "leave-one-out" in text
    assert math.isfinite(st.calibrate_runs(recs).factors["compute"])


def test_factors_the_runs_cannot_pin_are_dropped_and_the_rest_refitted(node, monkeypatch):
    """Four runs allow two factors; when the fit leaves the second uncertain beyond ± 50 % it is
    dropped and the first refitted alone (forced factors are kept as asked)."""
    import simtrain.calibrate.runs as runs
    recs = _synthetic({"compute": 0.8}, node, CASES[:4])
    real = runs._uncertainty

    def shaky(names, residuals, jac):
        out = real(names, residuals, jac)
        return {n: (5.0 if i == 1 else u) for i, (n, u) in enumerate(out.items())}
    monkeypatch.setattr(runs, "_uncertainty", shaky)
    cal = st.calibrate_runs(recs)
    assert list(cal.factors) == ["compute"]
    assert cal.factors["compute"] == pytest.approx(0.8, rel=5e-3)
    forced = st.calibrate_runs(recs, factors=["compute", "communication"])
    assert list(forced.factors) == ["compute", "communication"]


def test_a_compute_factor_scales_the_panel_rate_with_the_ceiling():
    """The panel copy is part of a matrix class's compute leg (``ComputeCurve.panel_bytes_per_s``):
    ``compute`` × 1.25 makes both rates 1.25× faster, the ceiling clipped at 1 and the rate not; a
    class factor does the same to its class alone."""
    from simtrain.calibrate.runs import scaled_efficiency
    from simtrain.glossary import OpClass
    from simtrain.specs.efficiency import ComputeCurve, Efficiency
    eff = Efficiency(compute={OpClass.MATMUL: ComputeCurve(peak_fraction=0.9, panel_bytes_per_s=20e9),
                              OpClass.CONV: ComputeCurve(peak_fraction=0.5, panel_bytes_per_s=10e9)})
    got = scaled_efficiency(eff, {"compute": 1.25})
    assert got.compute[OpClass.MATMUL].peak_fraction == 1.0
    assert got.compute[OpClass.MATMUL].panel_bytes_per_s == pytest.approx(25e9)
    one = scaled_efficiency(eff, {"class:conv": 2.0})
    assert one.compute[OpClass.CONV].panel_bytes_per_s == pytest.approx(20e9)
    assert one.compute[OpClass.MATMUL].panel_bytes_per_s == pytest.approx(20e9)
