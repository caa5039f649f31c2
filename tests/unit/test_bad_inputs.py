"""The bad-input corpus: every malformed spec or config in tests/data/bad/ is rejected with a
SpecError that names its field, and `simtrain check FILE` exits 2 without a traceback.

Each corpus file states what it expects in its first lines:
``# expect-field: <dotted path>`` (empty for a document-level problem) and
``# expect-in-message: <text the message must contain>``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from simtrain.cli import check as check_cli
from simtrain.cli import main
from simtrain.errors import SpecError
from simtrain.specs.train import TrainConfig, layout_problems

BAD = Path(__file__).resolve().parents[1] / "data" / "bad"
CORPUS = sorted(BAD.glob("*.yaml"))
REPO = Path(__file__).resolve().parents[2]


def _expectation(path: Path) -> tuple[str, str]:
    text = path.read_text(encoding="utf-8")
    field = re.search(r"^# expect-field:(.*)$", text, re.M)
    message = re.search(r"^# expect-in-message:(.*)$", text, re.M)
    assert field and message, f"{path.name} lacks its expect-field / expect-in-message header"
    return field.group(1).strip(), message.group(1).strip()


def test_corpus_is_large_enough():
    assert len(CORPUS) >= 30


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_rejected_with_field_and_reason(path):
    field, message = _expectation(path)
    with pytest.raises(SpecError) as info:
        check_cli.check_file(path)
    err = info.value
    assert field in err.fields, f"{path.name}: fields {err.fields}, message {err}"
    assert message.lower() in str(err).lower(), str(err)
    assert all(issue.file for issue in err.issues), "every issue names its file"


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_cli_check_exits_2_without_traceback(path, capsys):
    field, _ = _expectation(path)
    assert main(["check", str(path)]) == 2
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert str(path) in err and f": {field or '<document>'}: " in err
    assert "OK " not in out


def test_check_reports_every_file_and_fails_if_any_failed(capsys):
    good = REPO / "hardware_specs" / "devices" / "h100-sxm5-80gb.yaml"
    bad = [BAD / "link-negative-bandwidth.yaml", BAD / "empty-file.yaml"]
    assert main(["check", str(bad[0]), str(good), str(bad[1])]) == 2
    out, err = capsys.readouterr()
    assert f"OK {good}" in out
    assert all(str(b) in err for b in bad)
    assert "2 of 3 files failed" in err


def test_check_passes_good_files(capsys):
    files = [REPO / "hardware_specs" / d / f for d, f in
             (("devices", "a100-sxm4-80gb.yaml"), ("links", "nvlink4.yaml"), ("nodes", "tpu-v4-host.yaml"),
              ("clusters", "cs-3-cluster.yaml"), ("efficiency", "gpu.yaml"))]
    assert main(["check", *map(str, files)]) == 0
    out, _ = capsys.readouterr()
    assert out.count("OK ") == len(files)


def test_check_as_a_subprocess():
    """Once for real: the console entry point, several files, exit status 2, no traceback."""
    files = [str(BAD / "broken-yaml.yaml"), str(BAD / "job-world-size-mismatch.yaml"), str(BAD / "device-tier-order.yaml")]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "simtrain", "check", *files], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr + proc.stdout
    for f in files:
        assert f in proc.stderr
    assert "dp × tp × pp × cp = 8 × 8 × 8 × 1 = 512 does not match the cluster's 1024 devices" in proc.stderr


class _FakeModel:
    """Stands in for a Model: layout_problems only reads layout_facts()."""

    def __init__(self, **facts):
        self.facts = facts

    def layout_facts(self):
        return dict(self.facts)


def test_tp_not_dividing_heads():
    cfg = TrainConfig(global_batch_size=64, tp=8)
    model = _FakeModel(heads=12, blocks=12, seq_len=1024)
    # 8 devices: dp = 8 / 8 = 1; 12 heads are not divisible by tp = 8
    assert layout_problems(cfg, 8, model) == ["tp=8 does not divide the model's 12 attention heads"]
    assert layout_problems(TrainConfig(global_batch_size=64, tp=4), 8, model) == []


def test_tp_not_dividing_heads_through_check(monkeypatch, tmp_path, capsys):
    job = tmp_path / "job.yaml"
    job.write_text("spec: job\nname: heads\nmodel: gpt2\ncluster: dgx-h100\nnodes: 1\n"
                   "config: {global_batch_size: 64, tp: 8}\n")
    monkeypatch.setattr(check_cli, "_load_job_model", lambda name, file: (_FakeModel(heads=12), None))
    with pytest.raises(SpecError) as info:
        check_cli.check_file(job)
    assert info.value.fields == ["config"]
    assert "tp=8 does not divide the model's 12 attention heads" in str(info.value)
    assert main(["check", str(job)]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_world_size_message_spells_out_each_factor():
    cfg = TrainConfig(global_batch_size=1536, dp=8, tp=8, pp=8)
    assert layout_problems(cfg, 1024) == [
        "dp × tp × pp × cp = 8 × 8 × 8 × 1 = 512 does not match the cluster's 1024 devices"]


def test_build_names_the_file():
    with pytest.raises(SpecError) as info:
        TrainConfig.build("cfg.yaml", global_batch_size=10, micro_batch_size=3)
    assert info.value.issues[0].file == "cfg.yaml"
    assert "micro_batch_size=3 does not divide global_batch_size=10" in str(info.value)


def test_missing_file_is_a_spec_error(capsys):
    assert main(["check", "no/such/file.yaml"]) == 2
    assert "file not found" in capsys.readouterr().err
