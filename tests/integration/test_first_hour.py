"""Issue 40's small walls of the first hour: enum flags list their choices, the flag a report row
recommends exists, and a verb whose optional package is missing says what to install."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from simtrain.cli import main

JOB = ["--model", "gpt2", "--hardware", "dgx-h100", "--nodes", "1", "--global-batch-size", "8", "--seq-len", "512"]


@pytest.mark.parametrize("flag, listed", [("--recompute", "'none', 'selective', 'full', 'selective-op'"),
                                          ("--precision", "'bf16'"), ("--pipeline-schedule", "'interleaved-1f1b'"),
                                          ("--optimizer", "'adamw'")])
def test_enum_flags_list_their_choices(flag, listed, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["estimate", *JOB, flag, "nonsense"])
    assert stop.value.code == 2 and listed in capsys.readouterr().err


def test_emulate_precision_has_a_flag(capsys):
    assert main(["estimate", "--model", "gpt2", "--hardware", "a100-sxm4-80gb", "--precision", "fp8",
                 "--emulate-precision", "--global-batch-size", "8", "--seq-len", "512", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["feasible"] and any("emulat" in w for w in report["warnings"])


def test_a_missing_optional_package_is_an_install_hint_not_a_traceback():
    code = ("import sys; sys.modules['torch'] = None; from simtrain.cli import main; "
            "sys.exit(main(['calibrate', '--device', 'cpu', '--quick', '--out', 'never-written.yaml']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "needs the optional package 'torch': pip install 'simtrain[torch]'" in proc.stderr
