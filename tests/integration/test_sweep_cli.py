"""``simtrain sweep``: grid parsing, the table of best rows, JSON, --out, --plot, bad input → exit 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from simtrain.cli import main
from simtrain.cli.sweep import parse_grid, parse_value
from simtrain.errors import SpecError

JOB = ["--model", "gpt2", "--hardware", "dgx-h100", "--nodes", "1", "--global-batch-size", "64", "--seq-len", "1024"]


@pytest.mark.parametrize("text, value", [("4", 4), ("-2", -2), ("0.5", 0.5), ("1e3", 1000.0), ("true", True),
                                         ("False", False), ("none", None), ("bf16", "bf16"), (" fp8 ", "fp8")])
def test_values_parse_as_int_float_bool_none_or_text(text, value):
    parsed = parse_value(text)
    assert parsed == value and type(parsed) is type(value)


def test_grid_arguments():
    assert parse_grid(["tp=1,2,4", "micro-batch-size=1,2", "precision=bf16,fp8"]) == {
        "tp": [1, 2, 4], "micro_batch_size": [1, 2], "precision": ["bf16", "fp8"]}


@pytest.mark.parametrize("args, words", [([], "at least one axis"), (["tp"], "'tp': expected KEY=V1,V2"),
                                         (["tp="], "'tp=': expected"), (["=1,2"], "expected"),
                                         (["tp=1", "tp=2"], "axis 'tp' given twice")])
def test_bad_grid_syntax_names_the_argument(args, words):
    with pytest.raises(SpecError) as err:
        parse_grid(args)
    assert err.value.fields == ["--grid"] and words in str(err.value)


def test_table_of_the_best_rows(capsys):
    assert main(["sweep", *JOB, "--grid", "tp=1,2,8", "--grid", "micro_batch_size=2,4", "--top", "2",
                 "--no-progress"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "best 2 by samples_per_s:"
    assert out[1].split()[:4] == ["micro_batch_size", "tp", "step", "samples/s"]
    assert out[3].split()[:2] == ["4", "1"]  # the biggest micro-batch without TP is the fastest
    assert "6 points: 4 ok, 2 infeasible" in out and "  2 × tp=8 does not divide the model's 12 attention heads" in out


def test_json_out_and_plot(tmp_path, capsys):
    out, png = tmp_path / "s.csv", tmp_path / "s.png"
    assert main(["sweep", *JOB, "--grid", "micro_batch_size=1,2", "--json", "--out", str(out),
                 "--plot", str(png)]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["micro_batch_size"] for r in rows] == [1, 2] and all(r["status"] == "ok" for r in rows)
    assert pd.read_csv(out).step_time_s.tolist() == [r["step_time_s"] for r in rows]
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_no_feasible_point_exits_1(capsys):
    assert main(["sweep", *JOB, "--grid", "tp=5,7"]) == 1
    assert "no feasible point" in capsys.readouterr().out


@pytest.mark.parametrize("extra, words", [(["--grid", "tpp=1,2"], "grid.tpp: unknown key 'tpp'; did you mean 'tp'?"),
                                          (["--grid", "tp"], "--grid: 'tp': expected KEY=V1,V2,..."),
                                          (["--grid", "tp=1", "--sort", "speed"], "--sort: no column 'speed'"),
                                          (["--grid", "tp=1", "--out", "x.txt"], "must end in .parquet or .csv")])
def test_bad_input_exits_2_naming_it(extra, words, capsys):
    assert main(["sweep", *JOB, *extra]) == 2
    assert words in capsys.readouterr().err


def test_exit_2_has_no_traceback():
    proc = subprocess.run([sys.executable, "-m", "simtrain", "sweep", *JOB, "--grid", "mirco_batch_size=1"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "did you mean 'micro_batch_size'" in proc.stderr


def test_engine_flag_picks_the_engine_and_auto_equals_estimate(capsys):
    rows = {}
    for engine in ("auto", "estimate"):
        assert main(["sweep", *JOB, "--grid", "tp=1,2,5", "--grid", "zero_stage=0,3", "--engine", engine,
                     "--json", "--no-progress"]) == 0
        rows[engine] = json.loads(capsys.readouterr().out)
    pd.testing.assert_frame_equal(pd.DataFrame(rows["auto"]), pd.DataFrame(rows["estimate"]), rtol=1e-9)
    assert {r["status"] for r in rows["auto"]} == {"ok", "infeasible"}
    with pytest.raises(SystemExit) as stop:  # argparse's own refusal
        main(["sweep", *JOB, "--grid", "tp=1", "--engine", "fast"])
    assert stop.value.code == 2 and "invalid choice: 'fast'" in capsys.readouterr().err


def test_the_readme_sweep_and_its_python_twin_give_the_same_rows(capsys):
    # the job pins dp: 16 (8 × 8 on 1,024 GPUs); a grid over tp and pp works dp out per point instead
    assert main(["sweep", "workloads/jobs/default.yaml", "--grid", "tp=4,8", "--grid", "pp=8,16", "--json",
                 "--no-progress"]) == 0
    cli = pd.DataFrame(json.loads(capsys.readouterr().out))
    import simtrain as st
    job = st.load_job("default")
    api = st.sweep(job.model, st.load_cluster("dgx-a100-80gb", nodes=128), job.config, {"tp": [4, 8], "pp": [8, 16]})
    pd.testing.assert_frame_equal(cli, api.astype({"devices_count": "int64"}), rtol=1e-9, check_dtype=False)
    assert "does not match" not in " ".join(cli.reasons) and (cli.status == "ok").sum() == 3
