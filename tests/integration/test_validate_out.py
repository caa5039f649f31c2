"""``simtrain validate`` never writes into the source tree by default, and its measurement cache is keyed
by versions, machine and benchmark code (a stale file is never reused)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

pytest.importorskip("torch")

from simtrain._data import source_checkout  # noqa: E402
from validation import outdir  # noqa: E402
from validation.cli import add_arguments, config_from_args  # noqa: E402

pytestmark = [pytest.mark.torch]


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return p.parse_args(list(argv))


def test_default_out_under_a_plain_working_dir(tmp_path):
    assert outdir.default_out_dir(cwd=tmp_path) == tmp_path / "simtrain-validation"


def test_default_out_never_inside_the_checkout_or_package(tmp_path):
    import simtrain
    roots = [Path(simtrain.__file__).resolve().parent, Path(outdir.__file__).resolve().parent]
    if source_checkout() is not None:
        roots.append(source_checkout())
    for cwd in roots:
        got = outdir.default_out_dir(cwd=cwd, env={"XDG_CACHE_HOME": str(tmp_path)})
        assert got == tmp_path / "simtrain" / "validation"
        for r in roots:
            assert not got.resolve().is_relative_to(r.resolve())


def test_cli_default_is_not_the_committed_results(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    cfg = config_from_args(_args("--quick"))
    assert cfg.out_dir == tmp_path / "simtrain-validation"
    assert cfg.out_dir.resolve() != outdir.COMMITTED_RESULTS.resolve()
    assert config_from_args(_args("--quick", "--out", str(tmp_path / "x"))).out_dir == tmp_path / "x"


def test_cache_key_changes_with_versions_machine_and_code():
    fp = {"simtrain": "0.1.0", "torch": "2.13.0", "cpu_model": "X", "cpu_cores": 2, "host": "ab",
          "gpu": None, "gpu_count": 0, "cuda": None}
    base = outdir.cache_key("cpu", fp, "code1")
    assert base == outdir.cache_key("cpu", dict(fp), "code1")  # deterministic
    assert len(base) == 16
    changed = [outdir.cache_key("cpu", dict(fp, torch="2.14.0"), "code1"),
               outdir.cache_key("cpu", dict(fp, simtrain="0.2.0"), "code1"),
               outdir.cache_key("cpu", dict(fp, cpu_cores=4), "code1"),
               outdir.cache_key("cpu", dict(fp, host="cd"), "code1"),
               outdir.cache_key("cpu", fp, "code2")]
    assert base not in changed and len(set(changed)) == len(changed)


def test_suite_never_loads_a_stale_unkeyed_cache(monkeypatch, tmp_path):
    """A measurements file from an older run (the old unkeyed name) sits in the output folder: the
    suite asks for the keyed name instead, which carries this machine's and this code's key."""
    from validation import suite
    stale = tmp_path / "measurements-cpu-tiny-t1.json"
    stale.write_text("{}")
    seen = []

    def fake_calibrated(device, grid, threads, path, log, **kw):
        seen.append(Path(path))
        raise RuntimeError("stop")

    monkeypatch.setattr(suite, "calibrated", fake_calibrated)
    with pytest.raises(RuntimeError, match="stop"):
        suite._calibrations(suite.quick_config(out_dir=tmp_path), lambda _m: None)
    assert seen and seen[0] != stale
    assert seen[0].parent == tmp_path and outdir.cache_key("cpu") in seen[0].name


def test_rounds_default_and_flag(tmp_path):
    from validation.rounds import round_path
    assert config_from_args(_args("--quick")).rounds == 1
    assert config_from_args(_args()).rounds == 3  # full mode alternates 3 calibration passes with the steps
    assert config_from_args(_args("--quick", "--rounds", "2")).rounds == 2
    assert round_path(tmp_path / "m.json", 2) == tmp_path / "m.round2.json"
    assert round_path(None, 2) is None
