"""The estimate / simulate commands: the default job, flags, JSON, bad input → exit 2 without a traceback."""

import json
import subprocess
import sys

from simtrain.cli import main


def test_default_job_prints_the_report(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert "gpt3-175b on dgx-a100-80gb (1024 × a100-sxm4-80gb)" in out
    assert "time to train 3e+11 tokens" in out and "bottleneck:" in out


def test_estimate_with_flags_and_json(capsys):
    assert main(["estimate", "--model", "gpt2", "--hardware", "a100-sxm4-80gb", "--global-batch-size", "8",
                 "--micro-batch-size", "4", "--seq-len", "1024", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["feasible"] and doc["layout"]["micro_batches"] == 2 and 0 < doc["mfu"] < 1


def test_infeasible_layout_exits_1_with_reasons(capsys):
    assert main(["estimate", "workloads/jobs/default.yaml", "--tp", "3"]) == 1
    assert "INFEASIBLE" in capsys.readouterr().out


def test_bad_input_exits_2_without_traceback(tmp_path):
    bad = tmp_path / "job.yaml"
    bad.write_text("spec: job\nname: x\nmodel: gpt2\ncluster: dgx-a100-80gb\nconfig: {global_batch_size: 0}\n")
    proc = subprocess.run([sys.executable, "-m", "simtrain", "estimate", str(bad)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "global_batch_size" in proc.stderr


def test_simulate_writes_a_trace(tmp_path, capsys):
    trace = tmp_path / "t.json"
    assert main(["simulate", "--model", "gpt2", "--hardware", "dgx-a100-80gb", "--nodes", "1", "--pp", "2",
                 "--global-batch-size", "16", "--seq-len", "512", "--trace", str(trace)]) == 0
    assert "simtrain simulate" in capsys.readouterr().out
    assert json.loads(trace.read_text())["traceEvents"]
