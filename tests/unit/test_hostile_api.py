"""Issue 41: hostile and extreme input on the API and CLI — a clean SimtrainError naming the argument,
or a result that says why it cannot be used; never a traceback, a hang or a "feasible" null."""

from __future__ import annotations

import json
import math

import pytest

import simtrain as st
from simtrain.cli import main
from tests.conftest import _s, invented_device

CFG = {"global_batch_size": 8, "seq_len": 128}


# --- grids: counted and refused before any work; linear checks -------------------------------------
@pytest.mark.parametrize("grid, words", [
    ({"tp": list(range(1, 10_001)), "pp": list(range(1, 10_001))}, "has 100,000,000 points (10000 pp × 10000 tp)"),
    ({"micro_batch_size": range(1, 10**12)}, "has more than 100,000 values"),
    ({"global_batch_size": [2**64]}, "does not fit a 64-bit integer"),
    ({"memory_overhead_fraction": [float("inf")]}, "is not a finite number"),
])
def test_grids_that_cannot_run_are_refused_before_anything_runs(grid, words, monkeypatch):
    from simtrain.search import vector_rows
    monkeypatch.setattr(vector_rows, "auto_table", lambda *a, **k: pytest.fail("a point was evaluated"))
    with pytest.raises(st.SpecError, match="grid") as err:
        st.sweep("gpt2", "dgx-h100", CFG, grid)
    assert words in str(err.value)


def test_a_long_axis_with_a_repeat_is_found_in_linear_time():
    with pytest.raises(st.SpecError, match="value 7 appears more than once"):
        st.sweep("gpt2", "dgx-h100", CFG, {"micro_batch_size": [*range(1, 60_001), 7]})


# --- numbers: a result that is not finite is infeasible with a reason -----------------------------------
@pytest.mark.parametrize("override", [
    {"memory": [{"name": "hbm", "level": "hbm", "capacity_bytes": _s(10e9), "bandwidth_bytes_per_s": _s(1e-320)}]},
    {"peak_flops_per_s": {"fp32": _s(1e-320)}},
])
def test_an_underflowing_device_is_infeasible_not_a_feasible_null(override):
    cluster = st.Cluster.single(invented_device(**override))
    r = st.estimate("gpt2", cluster, {**CFG, "precision": "fp32"})
    assert not r.feasible and "not a finite positive number" in r.reasons[-1]
    row = st.sweep("gpt2", cluster, {**CFG, "precision": "fp32"}, {"micro_batch_size": [1, 2]})
    assert not row.feasible.any() and row.reasons.str.contains("not a finite positive number").all()


# --- names that would drive a terminal are refused ------------------------------------------------------
@pytest.mark.parametrize("field, text", [("name", "h100\x1b[2J"), ("name", "two\nlines"),
                                         ("description", "fake\x1b]0;title\x07"), ("description", "rtl\u202eevil")])
def test_control_characters_in_spec_text_are_refused(field, text):
    with pytest.raises(ValueError, match="control character"):
        invented_device(**{field: text})


def test_a_description_may_still_hold_newlines():
    assert invented_device(description="line one\nline two").description.count("\n") == 1


# --- wrong Python types and ranges name the argument -------------------------------------------------
@pytest.mark.parametrize("call, words", [
    (lambda: st.simulate("gpt2", "dgx-h100", CFG, contention="no"), "contention: must be True or False"),
    (lambda: st.simulate("gpt2", "dgx-h100", CFG, steps=10**6), "steps: must be a whole number from 1 to 10,000"),
    (lambda: st.plan("gpt2", "dgx-h100", tokens=1e9, max_pp=-1), "max_pp= must be a whole number ≥ 1"),
    (lambda: st.plan("gpt2", "dgx-h100", tokens=1e9, max_nodes="8"), "max_nodes= must be a whole number ≥ 1"),
    (lambda: st.plan("gpt2", "dgx-h100", tokens=1e9, config=[("tp", 4)]), "config= must be a dict"),
    (lambda: st.Cluster.single(5), "Cluster.single takes a Device or a device name"),
    (lambda: st.sweep("gpt2", "dgx-h100", CFG, {"tp": [1]}, out=5), "out: must be a path"),
    (lambda: st.estimate_heterogeneous("gpt2", 5, CFG), "clusters: must be a list"),
    (lambda: st.estimate_heterogeneous("gpt2", ["dgx-h100", "dgx-a100-80gb"], {"global_batch_size": 64}),
     "samples cannot give each of the"),
    (lambda: st.calibrate(5), "measurements: must be the Measurements"),
    (lambda: st.load_cluster("dgx-h100", nodes=10_000_000), "nodes: 10,000,000 nodes of 'dgx-h100'"),
    (lambda: st.TrainConfig(global_batch_size=2**50), "global_batch_size: Input should be less than or equal to"),
])
def test_bad_arguments_are_simtrain_errors_naming_them(call, words):
    with pytest.raises(st.SimtrainError) as err:
        call()
    assert words in str(err.value)


def test_a_huge_batch_on_the_simulator_is_refused_not_allocated():
    r = st.simulate("gpt2", st.load_cluster("dgx-h100", nodes=1), {"global_batch_size": 2**39, "pp": 2})
    assert not r.feasible and "the simulator would schedule" in r.reasons[0] and "use st.estimate" in r.reasons[0]


def test_plan_honours_the_layout_its_config_fixes():
    df = st.plan("gpt2", "dgx-h100", tokens=1e9, config={"tp": 4, "zero_stage": 1}, max_nodes=2)
    assert len(df) and (df.tp == 4).all() and (df.zero_stage == 1).all()


# --- CLI: --json errors are JSON too; counts are positive ------------------------------------------------
def test_an_error_with_json_is_also_a_json_object_on_stdout(capsys):
    assert main(["estimate", "--model", "gpt3", "--hardware", "dgx-h100", "--json"]) == 2
    captured = capsys.readouterr()
    err = json.loads(captured.out)
    assert err["type"] == "SpecError" and err["fields"] == ["model"] and "did you mean" in err["error"]
    assert captured.err.startswith("simtrain: error: model:")


@pytest.mark.parametrize("argv", [["sweep", "--model", "gpt2", "--hardware", "dgx-h100", "--grid", "tp=1", "--top", "0"],
                                  ["sweep", "--model", "gpt2", "--hardware", "dgx-h100", "--grid", "tp=1", "--top", "-1"],
                                  ["estimate", "--model", "gpt2", "--hardware", "dgx-h100", "--nodes", "0"]])
def test_counts_below_one_are_refused_at_the_flag(argv, capsys):
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2 and "must be ≥ 1" in capsys.readouterr().err


def test_a_feasible_result_is_finite_strict_json():
    r = st.estimate("gpt2", st.load_cluster("dgx-h100", nodes=1), CFG)
    d = json.loads(json.dumps(r.to_dict(), allow_nan=False, default=str))
    assert r.feasible and math.isfinite(d["step_time_s"]) and all(math.isfinite(v) for v in d["time_breakdown_s"].values())


@pytest.mark.parametrize("steps, every", [(10**18, 1), (10**12, 1000)])
def test_a_goodput_run_too_long_to_hold_is_refused_not_allocated(steps, every):
    with pytest.raises(st.SimtrainError, match="segments, more than 20,000,000"):
        st.simulate_run(10.0, restart_s=60, steps=steps, checkpoint_interval_steps=every, checkpoint_s=5,
                        mtbf_device_s=1e7, devices=8)


@pytest.mark.parametrize("nodes", [2**40, 10**7])
def test_a_torus_asked_for_too_many_nodes_is_refused_at_once(nodes):
    with pytest.raises(st.SpecError, match="a cluster has 1 to 1,000,000"):
        st.load_cluster("tpu-v5p-pod", nodes=nodes)
