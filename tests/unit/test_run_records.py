"""Measured runs from CSV / JSONL files (simtrain/calibrate/runs.py) and ``simtrain calibrate --runs``."""

from __future__ import annotations

import json

import pytest

import simtrain as st
from simtrain.calibrate.run_files import load_run_records
from simtrain.errors import SpecError

HEADER = "name,model,hardware,global_batch_size,micro_batch_size,seq_len,precision,optimizer,step_time_s\n"


def _true_step(batch: int) -> float:
    cfg = st.TrainConfig(global_batch_size=batch, micro_batch_size=batch, seq_len=1024, precision="bf16",
                         optimizer="adamw")
    return st.estimate("gpt2", "h100-sxm5-80gb", cfg).step_time_s


def test_csv_rows_become_records(tmp_path):
    path = tmp_path / "runs.csv"
    path.write_text(HEADER + "a,gpt2,h100-sxm5-80gb,8,8,1024,bf16,adamw,0.5\n"
                    "b,gpt2,h100-sxm5-80gb,16,8,,bf16,adamw,1.0\n")
    a, b = load_run_records(path)
    assert (a.name, a.step_time_s, a.config.global_batch_size, a.config.seq_len) == ("a", 0.5, 8, 1024)
    assert b.config.seq_len is None and b.config.micro_batch_size == 8  # empty cell: not given
    assert a.model.name.startswith("gpt2") and a.cluster.devices_count == 1


def test_jsonl_rows_become_records(tmp_path):
    path = tmp_path / "runs.jsonl"
    rows = [{"model": "gpt2", "cluster": "h100-sxm5-80gb", "global_batch_size": 4, "micro_batch_size": 4,
             "seq_len": 512, "step_time_s": 0.25, "peak_memory_bytes": 3e10}, {}]
    path.write_text(json.dumps(rows[0]) + "\n\n")
    (rec,) = load_run_records(path)
    assert rec.peak_memory_bytes == 3e10 and rec.config.seq_len == 512


@pytest.mark.parametrize("line,column,reason", [
    ("c,gpt2,h100-sxm5-80gb,8,3,1024,bf16,adamw,0.5", "config", "micro_batch_size=3 does not divide"),
    ("c,gpt2,h100-sxm5-80gb,8,8,1024,bf17,adamw,0.5", "precision", ""),
    ("c,gpt2,h100-sxm5-80gb,8,8,1024,bf16,adamw,-1", "step_time_s", "finite number > 0"),
    ("c,no-such-model,h100-sxm5-80gb,8,8,1024,bf16,adamw,0.5", "model", ""),
    ("c,gpt2,,8,8,1024,bf16,adamw,0.5", "hardware", "missing"),
])
def test_a_bad_row_names_file_line_and_column(tmp_path, line, column, reason):
    path = tmp_path / "runs.csv"
    path.write_text(HEADER + "a,gpt2,h100-sxm5-80gb,8,8,1024,bf16,adamw,0.5\n" + line + "\n")
    with pytest.raises(SpecError) as err:
        load_run_records(path)
    issue = err.value.issues[0]
    assert issue.file == f"{path}:3"
    assert issue.field == column or (column == "config" and issue.field in ("(config)", ""))
    assert reason in issue.reason


def test_unknown_column_and_bad_json_line(tmp_path):
    csv_path = tmp_path / "runs.csv"
    csv_path.write_text("model,hardware,step_time_s,global_batch_size,warp_speed\ngpt2,h100-sxm5-80gb,1,8,9\n")
    with pytest.raises(SpecError, match="warp_speed"):
        load_run_records(csv_path)
    jl = tmp_path / "runs.jsonl"
    jl.write_text('{"model": "gpt2"}\n{oops\n')
    with pytest.raises(SpecError, match="not valid JSON") as err:  # parsed before any row is built
        load_run_records(jl)
    assert err.value.issues[0].file == f"{jl}:2"
    jl.write_text('{"model": "gpt2"}\n')
    with pytest.raises(SpecError, match="missing") as err:
        load_run_records(jl)
    assert (err.value.issues[0].file, err.value.issues[0].field) == (f"{jl}:1", "hardware")


def test_cli_calibrate_runs_fits_and_writes_a_calibration(tmp_path, capsys):
    """Runs measured 1.25× slower than the shipped profile predicts: the fitted calibration (one
    factor per two runs) reproduces both measured steps within 3 %."""
    from simtrain.cli import main
    path = tmp_path / "runs.csv"
    path.write_text(HEADER + f"a,gpt2,h100-sxm5-80gb,8,8,1024,bf16,adamw,{1.25 * _true_step(8)}\n"
                    f"b,gpt2,h100-sxm5-80gb,16,16,1024,bf16,adamw,{1.25 * _true_step(16)}\n")
    out = tmp_path / "cal.yaml"
    assert main(["calibrate", "--runs", str(path), "--out", str(out)]) == 0
    cal = st.load_calibration(out)
    assert "runs: 2" in capsys.readouterr().out
    for r in cal.records:
        assert abs(r.error) < 0.03, r


def test_cli_bad_runs_file_exits_2(tmp_path, capsys):
    from simtrain.cli import main
    path = tmp_path / "runs.csv"
    path.write_text(HEADER + "a,gpt2,h100-sxm5-80gb,8,8,1024,bf16,adamw,zero\n")
    assert main(["calibrate", "--runs", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:2" in err and "step_time_s" in err
