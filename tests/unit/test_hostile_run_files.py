"""Runs files (``calibrate --runs``, ``st.load_run_records``) and the other measurement files read as
untrusted data (issue 41, item 3): a size cap, a nesting cap for JSON, encoding errors with the line,
duplicate JSON keys, duplicate CSV columns and ragged CSV rows refused — each a SpecError naming the
file and line, never a traceback (RecursionError, UnicodeDecodeError), never a row silently changed."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

import pytest

import simtrain.calibrate.run_files as run_files
from simtrain.calibrate.run_files import load_run_records
from simtrain.errors import SpecError

HEADER = "model,hardware,step_time_s,global_batch_size,micro_batch_size,seq_len\n"
ROW = "gpt2,h100-sxm5-80gb,0.5,8,8,256\n"
OBJ = {"model": "gpt2", "hardware": "h100-sxm5-80gb", "step_time_s": 0.5, "global_batch_size": 8,
       "micro_batch_size": 8, "seq_len": 256}


def _issue(path) -> tuple[str, str, str]:
    with pytest.raises(SpecError) as err:
        load_run_records(path)
    i = err.value.issues[0]
    return i.file, i.field, i.reason


def test_the_good_files_still_load(tmp_path):
    csv = tmp_path / "ok.csv"
    csv.write_bytes(b"\xef\xbb\xbf" + (HEADER + "\n" + ROW + ROW).encode())  # a BOM and a blank line: fine
    assert len(load_run_records(csv)) == 2
    jl = tmp_path / "ok.jsonl"
    jl.write_text(json.dumps(dict(OBJ, name="a\u2028b")) + "\n\n" + json.dumps(OBJ) + "\n")  # U+2028 is not a line end
    a, b = load_run_records(jl)
    assert a.name == "a\u2028b"


# ------------------------------------------------------------------------------------------ size cap
@pytest.mark.parametrize("name, text", [("big.csv", HEADER + ROW * 200), ("big.jsonl", (json.dumps(OBJ) + "\n") * 200)])
def test_a_file_over_the_size_cap_is_refused(tmp_path, monkeypatch, name, text):
    monkeypatch.setattr(run_files, "MAX_RUNS_BYTES", 1024)
    path = tmp_path / name
    path.write_text(text)
    file, _, reason = _issue(path)
    assert file == str(path) and "larger than 1024 bytes" in reason and "SIMTRAIN_MAX_RUNS_BYTES" in reason


def test_a_runs_file_that_is_not_a_regular_file_is_refused(tmp_path):
    os.mkfifo(tmp_path / "runs.csv")  # would block a plain open()
    assert "named pipe" in _issue(tmp_path / "runs.csv")[2]
    (tmp_path / "dir.jsonl").mkdir()
    assert "directory" in _issue(tmp_path / "dir.jsonl")[2]


# ------------------------------------------------------------------------------------ nesting depth
def test_a_jsonl_line_nested_100000_deep_is_a_clean_error(tmp_path):
    path = tmp_path / "deep.jsonl"
    path.write_text(json.dumps(OBJ) + "\n" + "[" * 100_000 + "]" * 100_000 + "\n")
    file, field, reason = _issue(path)
    assert (file, field) == (f"{path}:2", "(line)") and "nested more than 64 levels" in reason


def test_a_deep_value_inside_a_jsonl_object_and_a_csv_cell_are_clean_errors(tmp_path):
    path = tmp_path / "deep.jsonl"
    path.write_text(json.dumps(OBJ) + "\n" + json.dumps(OBJ) + "\n"
                    + '{"model": ' + '{"a": ' * 5000 + "1" + "}" * 5000 + "}\n")
    file, _, reason = _issue(path)
    assert file == f"{path}:3" and "nested" in reason
    csv = tmp_path / "deep.csv"
    csv.write_text(HEADER + ROW + "gpt2,h100-sxm5-80gb,0.5,8,8," + "[" * 30_000 + "]" * 30_000 + "\n")
    file, field, reason = _issue(csv)
    assert (file, field) == (f"{csv}:3", "seq_len") and "nested" in reason


# --------------------------------------------------------------------------------------- encoding
def test_an_undecodable_byte_names_its_line(tmp_path):
    csv = tmp_path / "latin1.csv"
    csv.write_bytes((HEADER + ROW).encode() + "gpt2,h100-sxm5-80gb,0.5,8,8,256,caf\xe9\n".encode("latin-1"))
    file, _, reason = _issue(csv)
    assert file == f"{csv}:3" and "not UTF-8" in reason and "0xe9" in reason
    jl = tmp_path / "binary.jsonl"
    jl.write_bytes(json.dumps(OBJ).encode() + b"\n\x89PNG\r\n\x1a\n\xff\xfe")
    file, _, reason = _issue(jl)
    assert file == f"{jl}:2" and "not UTF-8" in reason


# --------------------------------------------------------------------------------- duplicate JSON keys
def test_a_key_given_twice_in_a_jsonl_line_is_refused(tmp_path):
    path = tmp_path / "dup.jsonl"
    path.write_text(json.dumps(OBJ) + "\n" + json.dumps(OBJ)[:-1] + ', "step_time_s": 9.0}\n')
    file, _, reason = _issue(path)
    assert file == f"{path}:2" and "duplicate key 'step_time_s'" in reason  # not the last one silently kept
    path.write_text('{"model": "gpt2", "hardware": "h100-sxm5-80gb", "step_time_s": 0.5, '
                    '"global_batch_size": 8, "tp": {"a": 1, "a": 2}}\n')
    file, _, reason = _issue(path)
    assert file == f"{path}:1" and "duplicate key 'a'" in reason


def test_a_key_given_twice_in_a_csv_cell_and_nan_in_jsonl_are_refused(tmp_path):
    csv = tmp_path / "cell.csv"
    csv.write_text(HEADER + 'gpt2,h100-sxm5-80gb,0.5,8,8,"{""a"": 1, ""a"": 2}"\n')
    file, field, reason = _issue(csv)
    assert (file, field) == (f"{csv}:2", "seq_len") and "duplicate key" in reason
    jl = tmp_path / "nan.jsonl"
    jl.write_text(json.dumps(OBJ) + "\n" + json.dumps(dict(OBJ, step_time_s=float("nan"))) + "\n")
    file, _, reason = _issue(jl)
    assert file == f"{jl}:2" and "NaN" in reason


# ------------------------------------------------------------------------------- duplicate CSV columns
@pytest.mark.parametrize("header, column", [
    ("model,hardware,step_time_s,global_batch_size,model\n", "model"),
    ("model,hardware,step_time_s,tp, tp \n", "tp"),  # the same name once stripped
])
def test_a_column_named_twice_is_refused(tmp_path, header, column):
    path = tmp_path / "dup.csv"
    path.write_text(header + "gpt2,h100-sxm5-80gb,0.5,8,1\n")
    file, field, reason = _issue(path)
    assert (file, field) == (f"{path}:1", column) and "column given twice" in reason


def test_an_unnamed_column_is_refused(tmp_path):
    path = tmp_path / "blank.csv"
    path.write_text("model,hardware,,step_time_s\ngpt2,h100-sxm5-80gb,x,0.5\n")
    file, field, reason = _issue(path)
    assert (file, field) == (f"{path}:1", "(column 3)") and "empty column name" in reason


# -------------------------------------------------------------------------------------- ragged rows
@pytest.mark.parametrize("row, cells", [
    ("gpt2,h100-sxm5-80gb,0.5,8,8,256,extra\n", "7 cells"),   # a cell beyond the header: was dropped
    ("gpt2,h100-sxm5-80gb,0.5,8\n", "4 cells"),                 # cells missing: were "not given"
    ("gpt2,h100-sxm5-80gb,0.5,8,8,256,\n", "7 cells"),          # a trailing comma
])
def test_a_row_with_more_or_fewer_cells_than_the_header_is_refused(tmp_path, row, cells):
    path = tmp_path / "ragged.csv"
    path.write_text(HEADER + ROW + ROW + row + ROW)
    file, field, reason = _issue(path)
    assert (file, field) == (f"{path}:4", "(row)") and cells in reason and "header has 6" in reason


def test_a_quoted_cell_over_two_lines_counts_lines_and_a_broken_quote_is_refused(tmp_path):
    path = tmp_path / "multi.csv"
    path.write_text("name," + HEADER + '"two\nlines",' + ROW + "x,gpt2,h100-sxm5-80gb,0.5,8\n")
    file, _, _ = _issue(path)
    assert file == f"{path}:4"  # the record after the two-line cell starts on line 4
    path.write_text(HEADER + ROW + '"gpt2,h100-sxm5-80gb,0.5,8,8,256\n')
    file, _, reason = _issue(path)
    assert file.startswith(f"{path}:") and "not valid CSV" in reason


# ------------------------------------------------------------------------- other files read as data
def test_a_gzipped_profiler_trace_has_the_plain_traces_checks(tmp_path):
    from simtrain.calibrate.trace import read_profiler_trace
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(b'{"traceEvents": [], "traceEvents": []}'))
    with pytest.raises(SpecError, match="duplicate key 'traceEvents'"):
        read_profiler_trace(path)
    path.write_bytes(gzip.compress(b'{"traceEvents": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"))
    with pytest.raises(SpecError, match="nested"):
        read_profiler_trace(path)


def test_validation_results_and_parquet_measurements_are_checked(tmp_path):
    from simtrain.calibrate.records import Measurements
    from simtrain.report.plot_validation import validation_frame
    res = tmp_path / "results.json"
    res.write_text('{"cases": [], "cases": [{"case": "x"}]}')
    with pytest.raises(SpecError, match="duplicate key 'cases'"):
        validation_frame(res)
    res.write_text('{"cases": 5}')
    with pytest.raises(SpecError, match="not validation results"):
        validation_frame(res)
    pq = tmp_path / "m.parquet"
    pq.write_bytes(b"PAR1 not really parquet PAR1")
    with pytest.raises(SpecError, match="not a measurements file"):
        Measurements.load(pq)


# -------------------------------------------------------------------------------- the command line
@pytest.mark.parametrize("name, content", [
    ("runs.jsonl", (json.dumps(OBJ) + "\n" + "[" * 100_000 + "]" * 100_000 + "\n").encode()),
    ("runs.csv", (HEADER + ROW + "gpt2,h100-sxm5-80gb,0.5,8,8,256,1\n").encode()),
    ("runs.csv", (HEADER + ROW).encode() + b"gpt2,\xff\xfe,0.5,8,8,256\n"),
])
def test_calibrate_runs_exits_2_with_file_and_line_and_writes_nothing(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content)
    out = tmp_path / "cal.yaml"
    proc = subprocess.run([sys.executable, "-m", "simtrain", "calibrate", "--runs", str(path), "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and f"{path}:" in proc.stderr
    line = "2" if name.endswith(".jsonl") else "3"
    assert f"{path}:{line}" in proc.stderr
    assert sorted(os.listdir(tmp_path)) == [name]
