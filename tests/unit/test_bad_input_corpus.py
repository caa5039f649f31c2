"""The bad-input corpus (tests/bad_inputs/): every case exits 2 with a message naming its field (or
its file), prints no traceback and never echoes file content (the canary).

Cases run in-process through ``simtrain.cli.main`` under a SIGALRM guard; those that could hang if a
guard regressed (alias bombs, deep nesting, FIFOs) run in a subprocess with a timeout. Cases that
need the file system as it is at test time (a FIFO, a socket, symlinks out of a folder, an oversized
file) are built in ``tmp_path`` here. ``python tests/bad_inputs/make_corpus.py`` regenerates the rest.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import signal
import socket
import subprocess
import sys
import traceback
from pathlib import Path

import pytest

from simtrain.cli import main

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "bad_inputs"
CASES = json.loads((CORPUS / "cases.json").read_text(encoding="utf-8"))
CANARY = "CANARY-7c1e0b55-do-not-echo"
TIMEOUT_S = 20
LEAKS = (CANARY, "root:x:0:0", "root:*:", "root:!")  # the canary; the first line of /etc/passwd or /etc/shadow


class _Hang(Exception):
    pass


def _expand(argv: list[str]) -> list[str]:
    return [a.replace("{corpus}", str(CORPUS)).replace("{repo}", str(REPO)) for a in argv]


def run_in_process(argv: list[str], timeout: float = TIMEOUT_S) -> tuple[object, str, str]:
    """(exit status, stdout, stderr) of ``simtrain ARGV``; an escaping exception is printed as a traceback."""
    out, err = io.StringIO(), io.StringIO()

    def on_alarm(*_):
        raise _Hang(f"no answer in {timeout} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main(argv)
            except SystemExit as exc:  # argparse
                rc = exc.code
            except _Hang:
                raise
            except BaseException:  # noqa: BLE001 - what a user would see: a traceback
                traceback.print_exc()
                rc = "exception"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return rc, out.getvalue(), err.getvalue()


def run_subprocess(argv: list[str], timeout: float = TIMEOUT_S) -> tuple[object, str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "simtrain", *argv], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=REPO)
    return proc.returncode, proc.stdout, proc.stderr


def assert_rejected(rc, out: str, err: str, *, fields=(), message: str = "", file: str | None = None) -> None:
    shown = out + err
    assert "Traceback" not in shown, shown
    assert rc == 2, f"exit {rc!r}\n{shown}"
    for leak in LEAKS:
        assert leak not in shown, f"leaked {leak!r}: {shown}"
    if fields:
        # ours ("file: --flag: why") or argparse's own ("argument --flag: invalid choice ...")
        assert any(f": {f}" in err or f"argument {f}:" in err for f in fields), f"none of {fields} named in: {err}"
    elif file is not None:
        assert file.rstrip("/") in err, f"{file} not named in: {err}"
    assert message.lower() in err.lower(), f"{message!r} not in: {err}"
    assert len(err) < 4000, f"a very long message ({len(err)} characters)"


def _file_of(argv: list[str]) -> str | None:
    paths = [a for a in argv if a.startswith(str(CORPUS)) or a.startswith("/dev/")]
    return paths[-1] if paths else None


def test_corpus_is_large_and_varied():
    assert len(CASES) >= 150
    prefixes = {c["id"].split("--")[0] for c in CASES}
    for kind in ("device", "link", "node", "cluster", "model", "job", "efficiency", "hf-llama", "calibration", "hand"):
        assert kind in prefixes, kind
    assert sum(c["id"].startswith("cli-") for c in CASES) >= 20


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_case_is_rejected_cleanly(case):
    argv = _expand(case["argv"])
    runner = run_subprocess if case["isolate"] else run_in_process
    rc, out, err = runner(argv)
    assert_rejected(rc, out, err, fields=case["field"], message=case["message"], file=_file_of(argv))


def test_generator_is_deterministic():
    spec = importlib.util.spec_from_file_location("make_corpus", CORPUS / "make_corpus.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    first, second = mod.build(), mod.build()
    assert first == second
    assert mod.CANARY == CANARY
    assert len(first[1]) >= 150


# ---------------------------------------------------------------------------------- built at test time
NODE = """spec: node
name: n
device: {device}
devices_count: 1
fabric: {{topology: none}}
host: {{cpu_cores: {{value: 2, source: test}}, dram_bandwidth_bytes_per_s: {{value: 10 GB/s, source: test}}}}
"""


@pytest.fixture
def secret(tmp_path):
    """A folder outside the spec folder holding a file full of canaries."""
    outside = tmp_path / "outside"
    outside.mkdir()
    path = outside / "secret.yaml"
    path.write_text(f"{CANARY}: {CANARY}\nspec: {CANARY}\n")
    (tmp_path / "specs").mkdir()
    return path


def test_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    rc, out, err = run_subprocess(["check", str(fifo)])
    assert_rejected(rc, out, err, message="named pipe", file=str(fifo))


def test_fifo_named_by_a_spec_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "device.yaml")
    node = tmp_path / "node.yaml"
    node.write_text(NODE.format(device="device.yaml"))
    rc, out, err = run_subprocess(["check", str(node)])
    assert_rejected(rc, out, err, fields=["device"], message="named pipe")


def test_socket_is_refused(tmp_path):
    path = tmp_path / "s.yaml"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
        rc, out, err = run_in_process(["check", str(path)])
    assert_rejected(rc, out, err, message="socket", file=str(path))


def test_oversized_file_is_refused_before_parsing(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("spec: link\nname: big\n" + f"# {CANARY}\n" * 50_000)
    rc, out, err = run_in_process(["check", str(big)])
    assert_rejected(rc, out, err, message="larger than", file=str(big))


def test_oversized_hf_config_is_refused(tmp_path):
    big = tmp_path / "config.json"
    big.write_text(json.dumps({"model_type": "llama", "pad": CANARY * 40_000}))
    rc, out, err = run_in_process(["model", "show", str(big)])
    assert_rejected(rc, out, err, message="larger than", file=str(big))


def test_symlink_out_of_the_folder_is_refused(secret):
    specs = secret.parent.parent / "specs"
    (specs / "device.yaml").symlink_to(secret)
    node = specs / "node.yaml"
    node.write_text(NODE.format(device="device.yaml"))
    rc, out, err = run_in_process(["check", str(node)])
    assert_rejected(rc, out, err, fields=["device"], message="symlink")


def test_symlink_to_etc_passwd_is_refused_as_a_reference(tmp_path):
    (tmp_path / "device.yaml").symlink_to("/etc/passwd")
    node = tmp_path / "node.yaml"
    node.write_text(NODE.format(device="device.yaml"))
    rc, out, err = run_in_process(["check", str(node)])
    assert_rejected(rc, out, err, fields=["device"], message="outside")


def test_symlink_to_etc_passwd_given_directly_is_not_quoted(tmp_path):
    link = tmp_path / "passwd.yaml"
    link.symlink_to("/etc/passwd")
    rc, out, err = run_in_process(["check", str(link)])
    assert_rejected(rc, out, err, message="not a spec file", file=str(link))


def test_job_symlinked_model_out_of_the_folder_is_refused(secret):
    specs = secret.parent.parent / "specs"
    (specs / "model.yaml").symlink_to(secret)
    job = specs / "job.yaml"
    job.write_text("spec: job\nname: j\nmodel: model.yaml\ncluster: dgx-a100-80gb\nnodes: 1\n"
                   "config: {global_batch_size: 8}\n")
    for argv in (["check", str(job)], ["estimate", str(job)]):
        rc, out, err = run_in_process(argv)
        assert_rejected(rc, out, err, fields=["model"], message="symlink")


def test_relative_reference_inside_the_folder_still_works(tmp_path):
    """The rules refuse escapes, not ordinary relative references (a node naming a device beside it)."""
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "gpu.yaml").write_text((REPO / "hardware_specs/devices/h100-sxm5-80gb.yaml").read_text())
    node = tmp_path / "node.yaml"
    node.write_text(NODE.format(device="dev/gpu.yaml"))
    rc, out, err = run_in_process(["check", str(node)])
    assert rc == 0, err


def test_absolute_paths_are_fine_where_the_user_gives_them(secret):
    """On the command line a path is the user's own choice: it is read (and refused as a non-spec)."""
    rc, out, err = run_in_process(["check", str(secret)])
    assert_rejected(rc, out, err, fields=["spec"], message="not a spec file")
