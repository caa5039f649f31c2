"""validation.lab.repredict on the committed CPU record: its own measurements and chain timings,
re-predicted with this code."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from validation.lab.repredict import main, markdown, repredict  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.slow]


@pytest.fixture(scope="module")
def small():
    return repredict(models=("mlp", "cnn_bn"))


def test_the_chain_line_has_a_positive_slope_on_the_record(small):
    """The record's chains, predicted with this code, grow with depth as measured: a positive
    per-launch extra. With each imported layer its own kernel signature the slope was -2.85 µs on
    these same timings, and the per-step cost went uncharged (docs/own-device.md, "A second machine")."""
    rows, overhead = small
    assert overhead.fitted_slope_s > 0 and overhead.step_host_s > 0
    predicted = [r["predicted_s"] for r in sorted(overhead.rows, key=lambda r: r["depth"])]
    depths = sorted(r["depth"] for r in overhead.rows)
    per_block = [p / d for p, d in zip(predicted, depths, strict=True)]
    assert max(per_block) < 1.5 * min(per_block)  # linear in depth, not quadratic


def test_the_record_models_are_re_predicted_within_15_percent(small):
    rows, overhead = small
    assert [r.case for r in rows] == ["mlp/medium b128", "cnn_bn/medium b32"]
    for r in rows:
        assert abs(r.error_pct(r.now_s)) < 15.0, r
    md = markdown(rows, overhead)
    assert "| **step_time MAPE** |" in md and "mlp/medium b128" in md


def test_a_record_without_chain_timings_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "r.json"
    bad.write_text(json.dumps({"cases": [], "calibration": {}}))
    assert main(["--record", str(bad), "--models", "mlp"]) == 2
    assert "no overhead-chain timings" in capsys.readouterr().err
