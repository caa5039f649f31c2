"""st.sweep, issue 14: unknown keys fail first, bad points become rows, every row has its inputs,
outputs and reason; rows stream to Parquet / CSV and a rerun resumes without losing or repeating one."""

from __future__ import annotations

import csv
import math

import numpy as np
import pandas as pd
import pytest

import simtrain as st
from simtrain.search import sweep_rows
from simtrain.search.sweep import progress_bar
from simtrain.search.sweep_rows import BREAKDOWN_COLUMNS, point_key
from tests.conftest import invented_device, linear_op


@pytest.fixture(scope="module")
def tiny():
    ops = [linear_op(f"layers.{i}/fc", f"layers.{i}", 16, 256, 256) for i in range(4)]
    return st.Model("tiny", ops)


@pytest.fixture(scope="module")
def single():
    return st.Cluster.single(invented_device())


CFG = st.TrainConfig(global_batch_size=8, precision="fp32")


def _no_evaluation(*args, **kwargs):
    raise AssertionError("a point was evaluated")


def test_unknown_key_fails_before_anything_runs(tiny, single, monkeypatch):
    monkeypatch.setattr(sweep_rows, "evaluate_point", _no_evaluation)
    with pytest.raises(st.SpecError) as err:
        st.sweep(tiny, single, CFG, {"tp": [1], "micro_bach_size": [1, 2]})
    assert err.value.fields == ["grid.micro_bach_size"] and "did you mean 'micro_batch_size'" in str(err.value)


@pytest.mark.parametrize("grid, field, words", [
    ({"tp": 4}, "grid.tp", "list of values"),
    ({"tp": []}, "grid.tp", "non-empty"),
    ({"tp": [1, 2, 1]}, "grid.tp", "value 1 appears more than once"),
    ({}, "grid", "non-empty mapping"),
])
def test_malformed_grids_fail_before_anything_runs(tiny, single, monkeypatch, grid, field, words):
    monkeypatch.setattr(sweep_rows, "evaluate_point", _no_evaluation)
    with pytest.raises(st.SpecError) as err:
        st.sweep(tiny, single, CFG, grid)
    assert err.value.fields == [field] and words in str(err.value)


def test_bad_values_become_rows_and_the_sweep_goes_on(tiny):
    torus = st.load_cluster("tpu-v4-pod", nodes=1)
    df = st.sweep(tiny, torus, st.TrainConfig(global_batch_size=8), {"nodes": [1, 2.5, "two"], "tp": [1, "x"]})
    assert len(df) == 6
    good = df[(df.nodes == "1") & (df.tp == "1")].iloc[0]  # mixed-kind keys are stored as text
    assert good.feasible and good.status == "ok" and good.reasons == ""
    bad_nodes = df[(df.nodes == "2.5") & (df.tp == "1")].iloc[0]
    assert not bad_nodes.feasible and bad_nodes.status == "invalid"
    assert bad_nodes.reasons == "nodes: 2.5 is not a whole number of nodes >= 1"
    assert df[df.nodes == "two"].reasons.str.contains("nodes: 'two' is not a whole number").all()
    assert df[df.tp == "x"].reasons.str.startswith("tp: Input should be a valid integer").all()
    both = df[(df.nodes == "two") & (df.tp == "x")].reasons.iloc[0]  # every bad value of a point is named
    assert both.startswith("tp: ") and both.endswith("; nodes: 'two' is not a whole number of nodes >= 1")
    assert math.isnan(bad_nodes.step_time_s) and not bad_nodes.memory_fits


def test_an_exception_in_one_point_is_that_row_only(tiny, single, monkeypatch):
    import simtrain.estimator as estimator
    real = estimator.estimate

    def flaky(model, cluster, cfg):
        if cfg.micro_batch_size == 2:
            raise RuntimeError("boom")
        return real(model, cluster, cfg)

    monkeypatch.setattr(estimator, "estimate", flaky)
    df = st.sweep(tiny, single, CFG, {"micro_batch_size": [1, 2, 4]}, engine="estimate")
    assert list(df.status) == ["ok", "error", "ok"]
    assert df.reasons[1] == "RuntimeError: boom" and not df.feasible[1]


def test_rows_record_inputs_outputs_and_breakdown(tiny, single):
    df = st.sweep(tiny, single, CFG, {"micro_batch_size": [2], "optimizer": ["adam"]})
    row = df.iloc[0]
    r = st.estimate(tiny, single, st.TrainConfig(global_batch_size=8, precision="fp32", micro_batch_size=2,
                                                 optimizer="adam"))
    assert (row.micro_batch_size, row.optimizer) == (2, "adam")
    assert (row.step_time_s, row.samples_per_s, row.mfu, row.hfu) == (r.step_time_s, r.samples_per_s, r.mfu, r.hfu)
    assert (row.memory_bytes, row.memory_reserved_bytes) == (r.memory.total_bytes, r.memory.reserved_bytes)
    assert row.memory_fits == r.memory.fits and row.bottleneck == r.bottleneck and row.devices_count == 1
    for column in BREAKDOWN_COLUMNS:
        assert row[column] == r.time_breakdown_s[column[len("time_"):-len("_s")]]
    assert row.point_key == point_key({"micro_batch_size": 2, "optimizer": "adam"})


def test_names_resolve_like_estimate():
    df = st.sweep("gpt2", "dgx-a100-80gb", {"global_batch_size": 16, "seq_len": 128}, {"nodes": [1], "tp": [1, 2]})
    assert list(df.status) == ["ok", "ok"] and df.devices_count.tolist() == [8, 8]


def test_point_keys_are_stable_and_typed():
    assert point_key({"tp": 2, "pp": 1}) == point_key({"pp": 1, "tp": np.int64(2)})
    keys = {point_key({"tp": v}) for v in (1, 1.0, True, "1")}
    assert len(keys) == 4 and all(len(k) == 16 for k in keys)


def test_parquet_out_then_resume_evaluates_only_new_points(tiny, single, tmp_path, monkeypatch):
    out = tmp_path / "s.parquet"
    sweep = lambda grid, **kw: st.sweep(tiny, single, CFG, grid, out=out, engine="estimate", **kw)  # noqa: E731
    first = sweep({"micro_batch_size": [1, 2]})
    assert out.exists() and not (tmp_path / "s.parquet.parts").exists()
    pd.testing.assert_frame_equal(pd.read_parquet(out), first)
    calls = []
    real = sweep_rows.evaluate_point
    monkeypatch.setattr(sweep_rows, "evaluate_point", lambda *a, **k: calls.append(a[3]) or real(*a, **k))
    again = sweep({"micro_batch_size": [1, 2]})
    pd.testing.assert_frame_equal(again, first)
    assert calls == []
    wider = sweep({"micro_batch_size": [1, 2, 4]})
    assert calls == [{"micro_batch_size": 4}] and list(wider.micro_batch_size) == [1, 2, 4]
    pd.testing.assert_frame_equal(wider.iloc[:2], first)
    sweep({"micro_batch_size": [1, 2]}, resume=False)
    assert len(calls) == 3


def test_resume_retries_error_rows(tiny, single, tmp_path, monkeypatch):
    import simtrain.estimator as estimator
    real = estimator.estimate
    out = tmp_path / "s.parquet"
    monkeypatch.setattr(estimator, "estimate", lambda *a: (_ for _ in ()).throw(MemoryError("lost")))
    failed = st.sweep(tiny, single, CFG, {"micro_batch_size": [1, 2]}, out=out, engine="estimate")
    assert list(failed.status) == ["error", "error"]
    monkeypatch.setattr(estimator, "estimate", real)
    fixed = st.sweep(tiny, single, CFG, {"micro_batch_size": [1, 2]}, out=out)  # the auto engine takes it up
    assert list(fixed.status) == ["ok", "ok"] and fixed.point_key.is_unique


def test_resume_refuses_a_file_of_another_sweep(tiny, single, tmp_path):
    out = tmp_path / "s.parquet"
    st.sweep(tiny, single, CFG, {"micro_batch_size": [1]}, out=out)
    with pytest.raises(st.SpecError) as err:
        st.sweep(tiny, single, st.TrainConfig(global_batch_size=16), {"micro_batch_size": [1]}, out=out)
    assert "different sweep" in str(err.value) and str(out) in str(err.value)


def test_csv_out_round_trips_and_resumes(tiny, single, tmp_path, monkeypatch):
    out = tmp_path / "s.csv"
    grid = {"micro_batch_size": [1, 3], "optimizer": ["sgd", "adam"]}
    first = st.sweep(tiny, single, CFG, grid, out=out)
    header = next(csv.reader(out.open()))
    assert header[:4] == ["micro_batch_size", "optimizer", "feasible", "status"] and header[-1] == "point_key"
    pd.testing.assert_frame_equal(pd.read_csv(out)[["micro_batch_size", "step_time_s"]],
                                  first[["micro_batch_size", "step_time_s"]])
    monkeypatch.setattr(sweep_rows, "evaluate_point", _no_evaluation)
    pd.testing.assert_frame_equal(st.sweep(tiny, single, CFG, grid, out=out), first)


def test_out_must_be_parquet_or_csv(tiny, single, tmp_path):
    with pytest.raises(st.SpecError, match="must end in .parquet or .csv"):
        st.sweep(tiny, single, CFG, {"tp": [1]}, out=tmp_path / "s.json")


def test_progress_follows_the_terminal_and_the_flag(monkeypatch):
    class NotATty:
        def isatty(self):
            return False

        def write(self, text):
            pass

        def flush(self):
            pass

    monkeypatch.setattr("sys.stderr", NotATty())
    assert progress_bar(10, 0, None).disable and progress_bar(10, 0, False).disable
    assert not progress_bar(10, 0, True).disable
    # forced on, the bar shows at once however short the run (issue 39): no delay; auto waits 2 s
    assert progress_bar(10, 0, True).delay == 0.0


def test_plan_draws_its_progress_over_every_candidate(monkeypatch):
    """st.plan(progress=True): one bar, advanced to the candidate count (rejected and costed alike)."""
    import io

    class Tty(io.StringIO):
        def isatty(self):
            return True
    err = Tty()
    monkeypatch.setattr("sys.stderr", err)
    st.plan("gpt2", "dgx-h100", tokens=1e9, global_batch_size=64, max_nodes=2, max_pp=2, top=2, progress=True)
    text = err.getvalue()
    assert "plan" in text and "pt" in text
    done = [line for line in text.replace("\r", "\n").splitlines() if "100%" in line]
    assert done, text[-500:]


def test_chunk_size_must_be_positive(tiny, single):
    with pytest.raises(st.SpecError, match="chunk_size"):
        st.sweep(tiny, single, CFG, {"tp": [1]}, chunk_size=0)


def test_simulate_engine_agrees_with_estimate_when_nothing_contends():
    """engine="simulate" runs the DES per point; with nothing contending it equals the estimate."""
    import simtrain as st
    cluster = st.load_cluster("dgx-h100", nodes=1)
    base = dict(global_batch_size=16, seq_len=256)
    grid = {"pp": [1, 2, 4], "micro_batch_size": [1, 2]}
    sim = st.sweep("gpt2", cluster, base, grid=grid, engine="simulate", progress=False)
    est = st.sweep("gpt2", cluster, base, grid=grid, progress=False)
    assert (sim["status"] == "ok").all()
    assert (abs(sim["step_time_s"] / est["step_time_s"] - 1) < 1e-9).all()
