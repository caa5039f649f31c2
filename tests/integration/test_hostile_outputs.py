"""Hostile output paths (issue 41, item 2): every path a verb or API function writes is checked before
any work starts — the suffix is supported, a directory is not taken for a file (nor a file for a
folder), the folder is made on purpose or the place is refused as unwritable — with exit 2 / a
SpecError naming the flag or argument, no traceback, and nothing written (least of all a file beside
the one asked for)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import simtrain as st
from simtrain.cli import main
from simtrain.errors import SpecError
from simtrain.outputs import check_output_path

JOB = ["--model", "gpt2", "--hardware", "dgx-h100", "--nodes", "1", "--global-batch-size", "8", "--seq-len", "256"]
RUNS_HEADER = "model,hardware,step_time_s,global_batch_size,micro_batch_size,seq_len\n"


def _tree(root) -> set[str]:
    """Every path under ``root`` (files and folders), relative: 'nothing was written' compares two."""
    return {os.path.relpath(os.path.join(d, n), root) for d, dirs, files in os.walk(root) for n in dirs + files}


def _refused(capsys, argv: list[str], flag: str, *words: str) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and flag in err, err
    for w in words:
        assert w in err, err
    return err


def _no_work(monkeypatch):
    """Make every costing entry point fail the test if reached: a refused output must stop first."""
    def boom(*a, **k):
        raise AssertionError("work started before the output path was checked")
    import importlib
    for mod, name in (("simtrain.report.compare", "compare"), ("simtrain.search.sweep", "sweep"),
                      ("simtrain.search.plan", "plan"), ("simtrain.sim", "simulate"),
                      ("simtrain.cli.report", "load_job_inputs"), ("simtrain.cli.plot", "draw")):
        mod = importlib.import_module(mod)  # the module, not a function of the same name its package exports
        monkeypatch.setattr(mod, name, boom)


# ------------------------------------------------------------------------------------- unsupported suffix
@pytest.mark.parametrize("argv, flag, suffix", [
    (["simulate", *JOB, "--gantt", "{d}/x.unknownsuffix"], "--gantt", "'.unknownsuffix'"),
    (["compare", "gpt2", "dgx-h100", "--csv", "{d}/table.xlsx"], "--csv", "'.xlsx'"),
    (["plan", "gpt2", "dgx-h100", "--tokens", "1e9", "--plot", "{d}/pareto.gif"], "--plot", "'.gif'"),
    (["sweep", *JOB, "--grid", "tp=1,2", "--out", "{d}/rows.txt"], "--out", "'.txt'"),
    (["simulate", *JOB, "--trace", "{d}/trace"], "--trace", "no suffix"),
])
def test_an_unsupported_suffix_exits_2_before_any_work(tmp_path, capsys, monkeypatch, argv, flag, suffix):
    _no_work(monkeypatch)
    argv = [a.format(d=tmp_path) for a in argv]
    _refused(capsys, argv, flag, "unsupported file type", suffix, "must end in")
    assert _tree(tmp_path) == set()


# ----------------------------------------------------------------------- a directory where a file is meant
def test_gantt_to_a_directory_is_refused_and_nothing_is_written_beside_it(tmp_path, capsys, monkeypatch):
    _no_work(monkeypatch)
    (tmp_path / "SOMEDIR").mkdir()
    _refused(capsys, ["simulate", *JOB, "--gantt", str(tmp_path / "SOMEDIR")], "--gantt", "is a directory")
    assert _tree(tmp_path) == {"SOMEDIR"}  # no SOMEDIR.png beside it


@pytest.mark.parametrize("argv, flag", [
    (["compare", "gpt2", "dgx-h100", "--csv", "{d}/table.csv"], "--csv"),  # a folder named like a file
    (["plot", "breakdown", *JOB, "--out", "{d}/table.csv"], "--out"),
    (["sweep", *JOB, "--grid", "tp=1,2", "--plot", "{d}/table.csv"], "--plot"),
])
def test_a_directory_given_as_an_output_file_exits_2(tmp_path, capsys, monkeypatch, argv, flag):
    _no_work(monkeypatch)
    (tmp_path / "table.csv").mkdir()
    _refused(capsys, [a.format(d=tmp_path) for a in argv], flag, "is a directory")
    assert _tree(tmp_path) == {"table.csv"}


def test_api_sweep_out_a_directory_says_so_not_a_different_sweep(tmp_path, monkeypatch):
    import simtrain.search.sweep_store as store
    (tmp_path / "rows.parquet").mkdir()
    with pytest.raises(SpecError) as err:
        st.sweep("gpt2", "dgx-h100", st.TrainConfig(global_batch_size=8, seq_len=256), {"tp": [1, 2]},
                 out=tmp_path / "rows.parquet")
    assert "is a directory" in str(err.value) and "different sweep" not in str(err.value)
    assert err.value.issues[0].field == "out"
    with pytest.raises(SpecError, match="is a directory"):  # the store itself, as any caller meets it
        store.SweepStore(tmp_path / "rows.parquet", None)
    assert _tree(tmp_path) == {"rows.parquet"}


def test_api_writers_refuse_a_directory(tmp_path):
    from simtrain.report import plot
    d = tmp_path / "out.yaml"
    d.mkdir()
    with pytest.raises(SpecError, match="is a directory") as err:
        st.Calibration(factors={"compute": 0.5}).to_yaml(d)
    assert err.value.issues[0].field == "path"
    with pytest.raises(SpecError, match="is a directory"):
        plot.roofline("gpt2", "h100-sxm5-80gb", st.TrainConfig(global_batch_size=1, seq_len=128), path=d)
    assert _tree(tmp_path) == {"out.yaml"}


# ------------------------------------------------------------------------ a file where a folder is meant
def test_report_out_a_file_exits_2(tmp_path, capsys, monkeypatch):
    _no_work(monkeypatch)
    (tmp_path / "report").write_text("mine")
    _refused(capsys, ["report", *JOB, "--out", str(tmp_path / "report")], "--out", "not a folder")
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "report.html").mkdir()  # the page's own name taken by a folder
    _refused(capsys, ["report", *JOB, "--out", str(tmp_path / "r")], "--out", "is a directory")
    assert (tmp_path / "report").read_text() == "mine" and _tree(tmp_path) == {"report", "r", "r/report.html"}


# ------------------------------------------------------------------------------ an unwritable place
@pytest.mark.parametrize("argv, flag", [
    (["compare", "gpt2", "dgx-h100", "--csv", "{d}/a-file/sub/x.csv"], "--csv"),
    (["calibrate", "--runs", "{d}/runs.csv", "--out", "{d}/a-file/cal.yaml"], "--out"),
    (["calibrate", "--runs", "{d}/runs.csv", "--out", "/proc/simtrain-no-such/cal.yaml"], "--out"),
    (["plot", "memory", *JOB, "--out", "/proc/simtrain-memory.png"], "--out"),
    (["report", *JOB, "--out", "{d}/a-file/report"], "--out"),
])
def test_an_unwritable_place_exits_2_naming_the_flag(tmp_path, capsys, monkeypatch, argv, flag):
    _no_work(monkeypatch)
    import simtrain.calibrate.run_files
    monkeypatch.setattr(simtrain.calibrate.run_files, "load_run_records",
                        lambda *a: (_ for _ in ()).throw(AssertionError("runs read before --out was checked")))
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "runs.csv").write_text(RUNS_HEADER)
    _refused(capsys, [a.format(d=tmp_path) for a in argv], flag, "cannot")
    assert _tree(tmp_path) == {"a-file", "runs.csv"} and (tmp_path / "a-file").read_text() == "x"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_read_only_folder_exits_2(tmp_path, capsys, monkeypatch):
    _no_work(monkeypatch)
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        _refused(capsys, ["compare", "gpt2", "dgx-h100", "--csv", str(ro / "x.csv")], "--csv", "not writable")
        _refused(capsys, ["compare", "gpt2", "dgx-h100", "--csv", str(ro / "new" / "x.csv")], "--csv",
                 "cannot make its folder")
        assert not os.listdir(ro)
    finally:
        ro.chmod(0o700)


def test_other_things_that_are_not_files_are_refused(tmp_path):
    os.mkfifo(tmp_path / "pipe.csv")
    with pytest.raises(SpecError, match="named pipe") as err:  # never opened: it would block
        check_output_path(tmp_path / "pipe.csv", "--csv", (".csv",))
    assert err.value.issues[0].field == "--csv"
    (tmp_path / "link.csv").symlink_to(tmp_path / "nowhere" / "x.csv")
    with pytest.raises(SpecError, match="broken symbolic link"):
        check_output_path(tmp_path / "link.csv", "--csv", (".csv",))
    with pytest.raises(SpecError, match="File name too long|cannot"):
        check_output_path(tmp_path / ("a" * 5000 + ".csv"), "--csv", (".csv",))
    for bad in ("", "   ", 42, None, b"x.csv"):
        with pytest.raises(SpecError) as err:
            check_output_path(bad, "out", (".csv",))
        assert err.value.issues[0].field == "out"
    assert _tree(tmp_path) == {"pipe.csv", "link.csv"}


# -------------------------------------------------- a missing folder is made on purpose, then the file
def test_a_missing_folder_is_made_and_the_file_written_there(tmp_path, capsys):
    csv = tmp_path / "out" / "missing-dir" / "x.csv"
    assert main(["compare", "gpt2", "dgx-h100", "--seq-len", "256", "--csv", str(csv)]) == 0
    assert csv.read_text().startswith("hardware,")
    gantt = tmp_path / "deep" / "er" / "g.svg"
    assert main(["simulate", *JOB, "--gantt", str(gantt)]) == 0
    assert gantt.read_text().lstrip().startswith("<?xml")
    assert _tree(tmp_path) == {"out", "out/missing-dir", "out/missing-dir/x.csv", "deep", "deep/er", "deep/er/g.svg"}
    capsys.readouterr()


def test_a_refused_path_leaves_no_folder_behind(tmp_path):
    target = tmp_path / "new" / "er" / "x.png"
    with pytest.raises(SpecError, match="unsupported"):
        check_output_path(tmp_path / "new" / "er" / "x.bmp", "--out", (".png",))
    assert _tree(tmp_path) == set()
    assert check_output_path(target, "--out", (".png",)) == target
    assert _tree(tmp_path) == {"new", "new/er"}  # made on purpose; no probe file left


# ------------------------------------------------------------------ through the real entry point
@pytest.mark.parametrize("argv, flag", [
    (["compare", "gpt2", "dgx-h100", "--csv", "{d}/out/missing/x.unknownsuffix"], "--csv"),
    (["simulate", *JOB, "--gantt", "{d}"], "--gantt"),
    (["calibrate", "--runs", "{d}/runs.csv", "--out", "{d}/runs.csv/cal.yaml"], "--out"),
])
def test_no_traceback_from_the_command_line(tmp_path, argv, flag):
    (tmp_path / "runs.csv").write_text(RUNS_HEADER)
    before = _tree(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "simtrain", *[a.format(d=tmp_path) for a in argv]],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and flag in proc.stderr and "simtrain: error" in proc.stderr
    assert _tree(tmp_path) == before
    assert not (tmp_path.parent / (tmp_path.name + ".png")).exists()
