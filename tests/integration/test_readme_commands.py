"""Every command line in the README's "Command line" block runs as written (issue 15: examples that
run and fit). Run in-process from a scratch folder, with the checkout's relative paths made absolute."""

import os
import re
import shlex
from pathlib import Path

import pytest

from simtrain.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("Command line, one command per line")
    block = re.search(r"```bash\n(.*?)```", text[start:], re.S).group(1)
    return [line.strip() for line in block.splitlines() if line.strip().startswith("simtrain")]


COMMANDS = _readme_commands()


def test_the_block_is_one_command_per_line():
    assert len(COMMANDS) >= 12
    for line in COMMANDS:
        assert " | " not in line and "&&" not in line and "#" not in line, line


OUTPUT_FLAGS = ("--out", "--trace", "--gantt", "--plot")


def test_every_readme_command_writes_under_the_ignored_out_folder():
    """Running the README's commands in the checkout leaves `git status` clean: each output path is under
    out/, which .gitignore ignores (the 'Slower jobs' block included)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = [ln.strip() for block in re.findall(r"```bash\n(.*?)```", text, re.S) for ln in block.splitlines()
             if ln.strip().startswith("simtrain")]
    outputs = [argv[i + 1] for argv in map(shlex.split, lines) for i, a in enumerate(argv[:-1]) if a in OUTPUT_FLAGS]
    assert len(outputs) >= 8
    assert all(o.startswith("out/") for o in outputs), outputs
    assert "/out/" in (ROOT / ".gitignore").read_text(encoding="utf-8").split()


@pytest.mark.parametrize("line", COMMANDS, ids=[c[:60] for c in COMMANDS])
def test_readme_command_runs(line, tmp_path, monkeypatch, capsys):
    argv = shlex.split(line)[1:]
    argv = [str(ROOT / a) if a.startswith(("workloads/", "hardware_specs/")) else a for a in argv]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SIMTRAIN_ROOT", os.fspath(ROOT))
    rc = main(argv)
    out = capsys.readouterr()
    assert rc == 0, f"{line}\n{out.out[-2000:]}\n{out.err[-2000:]}"
    for flag in OUTPUT_FLAGS:
        if flag in argv:
            produced = tmp_path / argv[argv.index(flag) + 1]
            assert produced.exists(), f"{line}: {flag} wrote nothing"


def test_the_runs_calibration_line_runs_as_written(tmp_path, monkeypatch, capsys):
    """The 'Slower jobs' block's ``calibrate --runs`` line, with the shipped example runs file. (Its
    other two lines, a CPU calibration and the validation suite, take minutes: their quick modes run in
    tests/integration/test_measure_script.py and test_validation_quick.py.)"""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    (line,) = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("simtrain calibrate --runs")]
    argv = [str(ROOT / a) if a.startswith("workloads/") else a for a in shlex.split(line)[1:]]
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 0, capsys.readouterr().err[-2000:]
    assert (tmp_path / argv[argv.index("--out") + 1]).exists()



def test_the_python_quickstart_runs_as_written(tmp_path, monkeypatch, capsys):
    """The README's Python block, executed as written (from a scratch folder: it writes nothing)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    (block,) = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(block.strip().splitlines()) <= 15
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "README.md", "exec"), {"__name__": "readme"})
    out = capsys.readouterr().out
    assert "days," in out and "GiB on the peak rank" in out
    assert list(tmp_path.iterdir()) == []
