"""validation/lab/small_models.py: the cases build and train, the report's errors and MAPE by hand, and a
whole run in one fresh process writes its report where asked."""

from __future__ import annotations

import argparse
import json

import pytest

pytest.importorskip("torch")


def test_every_small_case_trains_and_is_timed():
    from validation.lab.small_models import SMALL, small_workloads, time_cases
    assert [w.name for w in small_workloads()] == list(SMALL)
    times = time_cases(rounds=1, steps=2, threads=1)
    assert set(times) == set(SMALL) and all(t > 0 for t in times.values())


def test_report_errors_are_against_the_median_process_by_hand():
    from validation.lab.small_models import _markdown
    measured = [{"a": 1e-3}, {"a": 3e-3}, {"a": 2e-3}]  # median 2 ms
    predicted = {"a": {"p.yaml": 3e-3, "q.yaml": 1e-3}}  # +50 %, −50 %
    text = _markdown(measured, predicted, argparse.Namespace(rounds=1, steps=1, threads=1))
    assert "| a | 2.000 | 1.000 / 3.000 / 2.000 | 3.000 (+50 %) | 1.000 (-50 %) |" in text
    assert "**50.0 %** | **50.0 %**" in text


def test_a_run_in_a_fresh_process_writes_its_report(tmp_path):
    from validation.lab.small_models import main
    assert main(["--processes", "1", "--rounds", "1", "--steps", "1", "--threads", "1", "--out", str(tmp_path)]) == 0
    got = json.loads((tmp_path / "small-models.json").read_text())
    assert len(got["measured"]) == 1 and set(got["measured"][0]) == set(got["predicted"])
    assert "MAPE" in (tmp_path / "small-models.md").read_text()
