"""`simtrain specs list`, `simtrain specs show NAME` and print_library(), end to end through the CLI."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import simtrain as st
from simtrain.cli import main
from simtrain.cli.specs import headline_peak, print_library, show_text
from simtrain.specs.library import library_names

REPO = Path(__file__).resolve().parents[2]


def _table_rows(text: str, title: str) -> dict[str, list[str]]:
    """Rows of one table in `specs list` output, keyed by name (columns split on 2+ spaces)."""
    block = text.split(title, 1)[1].split("\n\n", 1)[0].splitlines()[3:]
    return {cols[0]: cols for cols in (re.split(r"\s{2,}", line.strip()) for line in block if line.strip())}


def test_specs_list_shows_the_whole_library(capsys):
    assert main(["specs", "list"]) == 0
    out = capsys.readouterr().out
    devices = _table_rows(out, "Devices")
    assert sorted(devices) == library_names("device")
    assert sorted(_table_rows(out, "Links")) == library_names("link")
    assert sorted(_table_rows(out, "Nodes")) == library_names("node")
    assert sorted(_table_rows(out, "Clusters")) == library_names("cluster")
    # A100 80 GB: 312 TFLOP/s bf16, 80 GiB (79.15 usable), 2039 GB/s
    assert devices["a100-sxm4-80gb"] == ["a100-sxm4-80gb", "gpu", "312 TFLOP/s", "bf16",
                                         "80.0 GiB (79.2 GiB usable)", "2.04 TB/s"]
    # V100 has no bf16: its best 16-bit peak is fp16
    assert devices["v100-sxm2-32gb"][2:4] == ["125 TFLOP/s", "fp16"]
    # Alveo U280 has no 16-bit path in the library: fp32
    assert devices["alveo-u280"][2:4] == ["3.61 TFLOP/s", "fp32"]  # DSPs × FMA per DSP × clock
    # NVLink4 per direction is half of 50 GB/s bidirectional
    assert _table_rows(out, "Links")["nvlink4"][2] == "25.0 GB/s"
    assert _table_rows(out, "Nodes")["dgx-h100"][-1] == "450 GB/s"
    assert _table_rows(out, "Clusters")["tpu-v4-pod"][3] == "torus 16x16x16"
    n_devices = len(library_names("device"))  # 17 before the 2026 hardware (issue 40), 25 with it
    assert re.search(rf"\d+ items \({n_devices} devices, \d+ links, \d+ nodes, \d+ clusters\); \d+ numbers by mark", out)


def test_specs_alone_and_kind_filter(capsys):
    assert main(["specs"]) == 0
    assert "Devices" in capsys.readouterr().out
    assert main(["specs", "list", "--kind", "link"]) == 0
    out = capsys.readouterr().out
    assert "Links" in out and "Devices" not in out


def test_print_library_is_the_default_table(capsys):
    assert print_library() == 0
    out = capsys.readouterr().out
    for name in library_names("device"):
        assert name in out


def test_headline_peak_order():
    assert headline_peak(st.load_device("h100-sxm5-80gb"))[0].value == "bf16"
    assert headline_peak(st.load_device("versal-v80"))[0].value == "bf16"  # bf16 through the fp32 DSP path
    assert headline_peak(st.load_device("alveo-u280"))[0].value == "fp32"


def test_specs_show_device_lists_sources_marks_and_derivations(capsys):
    assert main(["specs", "show", "h100-sxm5-80gb"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("device h100-sxm5-80gb")
    assert "bf16: 989 TFLOP/s  [V2] NV-H100-DS via HPCT-H100 (sparse 1979)" in out
    assert "int8: 1.98 POP/s" in out
    assert "capacity_bytes: 80.0 GiB  [V2]" in out
    assert "bf16 peak = 528 units x 512 FMA/clk x 2 x 1.83 GHz = 989 TFLOP/s = 100.00 % of the datasheet peak" in out


def test_specs_show_finds_every_kind_and_shared_names(capsys):
    assert main(["specs", "show", "nvlink4"]) == 0
    assert "per direction: 25.0 GB/s" in capsys.readouterr().out
    # dgx-a100-80gb is both a node and a cluster: both are shown
    assert main(["specs", "show", "dgx-a100-80gb"]) == 0
    out = capsys.readouterr().out
    assert "node dgx-a100-80gb" in out and "cluster dgx-a100-80gb" in out
    assert "fabric per device, per direction: 300 GB/s (12 links x 25.0 GB/s)" in out
    assert main(["specs", "show", "dgx-a100-80gb", "--kind", "cluster"]) == 0
    assert "node dgx-a100-80gb " not in capsys.readouterr().out
    assert "efficiency gpu" in show_text("gpu")


def test_specs_show_every_item():
    for kind in ("device", "link", "node", "cluster"):
        for name in library_names(kind):
            text = show_text(name, kind)
            assert text.startswith(f"{kind} {name}")
            assert "[" in text  # at least one sourced number with its mark


def test_specs_show_unknown_name_exits_2(capsys):
    assert main(["specs", "show", "h300"]) == 2
    err = capsys.readouterr().err
    assert "no library item named 'h300'" in err and "Traceback" not in err


@pytest.mark.parametrize("argv", [["specs", "list"], ["specs", "show", "tpu-v4-pod"]])
def test_as_a_subprocess(argv):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "simtrain", *argv], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert "tpu-v4" in proc.stdout
