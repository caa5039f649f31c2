"""Installable anywhere: a built wheel works outside the checkout.

The wheel is built from a copy of the sources (so that the checkout gets no build/ folder), installed
with ``pip install --target`` into a temporary folder and used from another temporary folder with
``SIMTRAIN_ROOT`` unset: the hardware and model libraries must come from inside the wheel
(``simtrain/_data``), never from the checkout, and the wheel must hold no top-level package but
``simtrain``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import simtrain
from simtrain._data import data_root
from simtrain.cli import main
from simtrain.cli._json import dumps

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "setup.py", "README.md", "simtrain", "hardware_specs", "workloads", "validation")

# Run inside the installed copy: the venv's editable-install finder (which maps simtrain and, in older
# editable installs, validation to the checkout) is dropped so that nothing can come from the checkout.
PROBE = r"""
import io, json, sys, contextlib
sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in getattr(f, "__module__", "")]
import simtrain as st
from simtrain.cli import main
from simtrain.specs.library import HARDWARE_DIR, library_names, library_path

def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()

r = st.estimate(st.load_model("gpt2"), st.load_cluster("dgx-h100", nodes=1), st.TrainConfig(global_batch_size=8))
specs = run("specs", "list")
est = run("estimate", "--model", "gpt2", "--hardware", "dgx-h100", "--nodes", "1", "--global-batch-size", "8", "--json")
default = run()
validate = run("validate")
sys.modules["torch"] = None  # a wheel installed without the torch extra
no_torch = run("calibrate", "--device", "cpu", "--quick", "--out", "never-written.yaml")
print(json.dumps({
    "file": st.__file__, "hardware_dir": str(HARDWARE_DIR), "device": str(library_path("device", "h100-sxm5-80gb")),
    "models": library_names("model"), "step_time_s": r.step_time_s, "feasible": r.feasible,
    "specs": specs, "estimate": est, "default": default[:2], "validate": validate, "no_torch": no_torch,
    "validation_importable": __import__("importlib.util").util.find_spec("validation") is not None,
}))
"""


def _can_build_offline() -> bool:
    """setuptools with a built-in bdist_wheel (>= 70.1), or the wheel package, in this environment."""
    if importlib.util.find_spec("setuptools") is None:
        return False
    return importlib.util.find_spec("setuptools.command.bdist_wheel") is not None or \
        importlib.util.find_spec("wheel") is not None


def _build_wheel(tmp: Path) -> Path:
    src = tmp / "src"
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "results"))
        else:
            src.mkdir(exist_ok=True)
            shutil.copy2(path, src / name)
    offline = _can_build_offline()  # else pip fetches setuptools into an isolated build environment
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp / "dist"), str(src)]
    out = subprocess.run(cmd + (["--no-build-isolation"] if offline else []), capture_output=True, text=True,
                         timeout=240)
    if out.returncode != 0 and not offline and "connection" in (out.stdout + out.stderr).lower():
        pytest.skip("no setuptools>=70.1 (or wheel) here and no package index to fetch one from")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    (wheel,) = (tmp / "dist").glob("simtrain-*.whl")
    return wheel


@pytest.mark.slow
def test_wheel_installs_and_runs_outside_the_checkout(tmp_path):
    wheel = _build_wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names}
    assert top == {"simtrain", f"simtrain-{simtrain.__version__}.dist-info"}, top  # no validation/
    for path in ("simtrain/py.typed", "simtrain/_data/hardware_specs/devices/h100-sxm5-80gb.yaml",
                 "simtrain/_data/hardware_specs/clusters/dgx-h100.yaml", "simtrain/_data/workloads/models/gpt2.yaml",
                 "simtrain/_data/workloads/jobs/default.yaml", "simtrain/report/public_mfu.yaml"):
        assert path in names, path
    for folder in ("hardware_specs", "workloads"):  # every library file ships, none other
        shipped = {n.split(f"simtrain/_data/{folder}/", 1)[1] for n in names if n.startswith(f"simtrain/_data/{folder}/")}
        assert shipped == {p.relative_to(ROOT / folder).as_posix() for p in (ROOT / folder).rglob("*")
                           if p.is_file()}, folder

    site = tmp_path / "site"
    out = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "-q",
                          "--target", str(site), str(wheel)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert not (site / "validation").exists()

    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("SIMTRAIN_ROOT", "PYTHONPATH")}
    env["PYTHONPATH"] = str(site)
    version = subprocess.run([sys.executable, "-m", "simtrain", "--version"], cwd=work, env=env,
                             capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.strip() == f"simtrain {simtrain.__version__}", version

    probe = subprocess.run([sys.executable, "-c", PROBE], cwd=work, env=env, capture_output=True, text=True,
                           timeout=120)
    assert probe.returncode == 0, probe.stderr[-4000:]
    got = json.loads(probe.stdout.splitlines()[-1])
    data = (site / "simtrain" / "_data").resolve()
    assert Path(got["file"]).resolve() == (site / "simtrain" / "__init__.py").resolve()
    assert Path(got["hardware_dir"]).resolve() == data / "hardware_specs"
    assert Path(got["device"]).resolve() == data / "hardware_specs" / "devices" / "h100-sxm5-80gb.yaml"
    assert {"gpt2", "gpt3-175b", "llama3-8b"} <= set(got["models"])
    assert got["feasible"] and got["step_time_s"] > 0
    rc, text, err = got["specs"]
    assert rc == 0 and "h100-sxm5-80gb" in text and "dgx-h100" in text, err
    rc, text, err = got["estimate"]
    assert rc == 0, err
    assert json.loads(text, parse_constant=_reject)["step_time_s"] > 0
    assert got["default"][0] in (0, 1) and "gpt" in got["default"][1].lower()  # the default job, from the wheel
    rc, _, err = got["validate"]
    assert not got["validation_importable"]
    assert rc == 2 and ("source checkout" in err or "torch" in err), err
    rc, _, err = got["no_torch"]  # issue 40: calibrate from a wheel without torch says what to install
    assert rc == 2 and "pip install 'simtrain[torch]'" in err and "Traceback" not in err, err
    assert not (work / "never-written.yaml").exists()


def _reject(constant: str):
    raise ValueError(f"not strict JSON: {constant}")


def test_simtrain_root_overrides_the_library_location(monkeypatch, tmp_path):
    monkeypatch.setenv("SIMTRAIN_ROOT", str(tmp_path))
    assert data_root() == tmp_path
    monkeypatch.delenv("SIMTRAIN_ROOT")
    assert data_root() == ROOT  # a source checkout: the top-level folders, no copy


def test_version_flag_prints_the_version_and_exits_0(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.strip() == f"simtrain {simtrain.__version__}"


def test_json_output_is_strict_nan_and_inf_become_null():
    np = pytest.importorskip("numpy")
    obj = {"a": float("nan"), "b": [float("inf"), -float("inf"), 1.5, np.float32("nan"), np.float64(2.0)],
           "c": (1, True, None, "x"), "d": {"e": np.int64(3)}}
    text = dumps(obj)
    assert json.loads(text, parse_constant=_reject) == {"a": None, "b": [None, None, 1.5, None, 2.0],
                                                        "c": [1, True, None, "x"], "d": {"e": 3}}
