"""Issue 41's contract, fuzzed (hypothesis): every verb, on any input, ends in a clean error (a
SimtrainError from the API; exit 2 and no traceback from the CLI, a JSON object with --json) or in a
result that is finite and consistent — within a time bound."""

from __future__ import annotations

import contextlib
import io
import json
import math
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

import simtrain as st
from simtrain.cli import main

pytestmark = pytest.mark.timeout(600)

TIME_BOUND_S = 30.0  # one call; the slowest honest answer here is a layout search (~3 s)

# values of every kind a careless script passes: good ones, wrong types, extremes, bad text
_ANY = hs.one_of(hs.integers(min_value=-3, max_value=64), hs.integers(min_value=2**40, max_value=2**70),
                 hs.floats(allow_nan=True, allow_infinity=True), hs.booleans(), hs.none(),
                 hs.sampled_from(["bf16", "fp8", "full", "selective", "1f1b", "fsdp2", "", "x" * 300, "\x1b[2J",
                                  "../../etc/passwd", "nan"]),
                 hs.lists(hs.integers(0, 4), max_size=3))
_FIELDS = ["global_batch_size", "micro_batch_size", "seq_len", "tp", "pp", "dp", "zero_stage", "precision",
           "recompute", "pipeline_schedule", "virtual_stages", "stack", "sequence_parallel", "optimizer",
           "memory_overhead_fraction", "not_a_field"]
_MODELS = ["gpt2", "gpt2-medium", "bert-base", "gtp2", "", "../workloads/models/gpt2.yaml", "x" * 5000]
_HARDWARE = ["dgx-h100", "dgx-a100-80gb", "h100-sxm5-80gb", "tpu-v5p-pod", "dgx-h1000", "/dev/null", "\x00"]


def _timed(fn):
    start = time.monotonic()
    out = fn()
    assert time.monotonic() - start < TIME_BOUND_S
    return out


def _consistent(report) -> None:
    """A report is either infeasible with a reason or feasible with finite, positive, adding-up numbers."""
    if not report.feasible:
        assert report.reasons and all(isinstance(r, str) and r for r in report.reasons)
        return
    assert math.isfinite(report.step_time_s) and report.step_time_s > 0
    parts = report.time_breakdown_s
    assert all(math.isfinite(v) and v >= -1e-12 for v in parts.values()), parts
    assert 0 < report.mfu <= 1.0 + 1e-9 or report.mfu == 0
    assert report.memory.fits and math.isfinite(report.memory.reserved_bytes)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=hs.sampled_from(_MODELS), hardware=hs.sampled_from(_HARDWARE),
       cfg=hs.dictionaries(hs.sampled_from(_FIELDS), _ANY, max_size=4), nodes=hs.one_of(hs.none(), _ANY))
def test_estimate_api_is_a_clean_error_or_a_consistent_report(model, hardware, cfg, nodes):
    cfg = {"global_batch_size": 8, "seq_len": 256, **cfg}

    def call():
        cluster = st.load_cluster(hardware, nodes=nodes) if nodes is not None else hardware
        return st.estimate(model, cluster, cfg)
    try:
        report = _timed(call)
    except st.SimtrainError as err:
        assert str(err)
        return
    _consistent(report)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(grid=hs.dictionaries(hs.sampled_from(_FIELDS + ["nodes"]), hs.lists(_ANY, min_size=1, max_size=3),
                            min_size=1, max_size=3))
def test_sweep_api_is_a_clean_error_or_rows_with_reasons(grid):
    cluster = st.load_cluster("dgx-h100", nodes=1)
    try:
        df = _timed(lambda: st.sweep("gpt2", cluster, {"global_batch_size": 8, "seq_len": 256}, grid,
                                     progress=False))
    except st.SimtrainError as err:
        assert str(err)
        return
    assert set(df.status) <= {"ok", "infeasible", "invalid", "error"} and "error" not in set(df.status)
    ok = df[df.feasible]
    assert ok.step_time_s.map(math.isfinite).all() and (ok.step_time_s > 0).all()
    assert (df[~df.feasible].reasons.str.len() > 0).all()


_FLAGS = hs.lists(hs.tuples(hs.sampled_from(["--nodes", "--global-batch-size", "--micro-batch-size", "--tp", "--pp",
                                             "--seq-len", "--precision", "--recompute", "--zero-stage", "--stack",
                                             "--tokens"]),
                            hs.sampled_from(["0", "1", "2", "8", "-1", "1e400", "nan", "99999999999999999999", "bf16",
                                             "full", "fsdp2", "x", ""])), max_size=3)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(verb=hs.sampled_from(["estimate", "simulate"]), model=hs.sampled_from(_MODELS[:4]),
       hardware=hs.sampled_from(_HARDWARE), flags=_FLAGS, as_json=hs.booleans())
def test_cli_verbs_exit_cleanly(verb, model, hardware, flags, as_json):
    argv = [verb, "--model", model, "--hardware", hardware, "--seq-len", "256",
            *[x for pair in flags for x in pair], *(["--json"] if as_json else [])]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = _timed(lambda: main(argv))
        except SystemExit as stop:  # argparse refusing a flag's value
            rc = stop.code
    assert rc in (0, 1, 2), (argv, rc, err.getvalue()[-500:])
    assert "Traceback" not in err.getvalue() + out.getvalue()
    if rc == 2:
        assert "error" in err.getvalue()
        if as_json and "usage:" not in err.getvalue():
            assert "error" in json.loads(out.getvalue())
    elif as_json:
        report = json.loads(out.getvalue())
        if report["feasible"]:
            assert report["step_time_s"] is not None and report["step_time_s"] > 0


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tokens=hs.one_of(hs.floats(1e6, 1e12), _ANY), deadline_s=hs.one_of(hs.none(), hs.floats(1e3, 1e8), _ANY),
       top=hs.one_of(hs.integers(1, 20), _ANY), max_nodes=hs.one_of(hs.integers(1, 16), _ANY),
       objective=hs.one_of(hs.sampled_from(["cost", "time", "energy"]), _ANY),
       precision=hs.sampled_from(["bf16", "fp8", "fp4", "fp7", None, 3]))
def test_plan_api_is_a_clean_error_or_ranked_finite_rows(tokens, deadline_s, top, max_nodes, objective, precision):
    try:
        df = _timed(lambda: st.plan("gpt2", "dgx-h100", tokens=tokens, deadline_s=deadline_s, top=top,
                                    max_nodes=max_nodes, objective=objective, precision=precision,
                                    global_batch_size=64, seq_len=256, progress=False))
    except st.SimtrainError as err:
        assert str(err)
        return
    assert len(df) <= top
    assert df.time_to_train_s.map(math.isfinite).all() and (df.time_to_train_s > 0).all()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hardware=hs.lists(hs.sampled_from(_HARDWARE), min_size=1, max_size=3),
       cfg=hs.dictionaries(hs.sampled_from(_FIELDS), _ANY, max_size=3))
def test_compare_api_is_a_clean_error_or_one_row_per_hardware(hardware, cfg):
    try:
        df = _timed(lambda: st.compare("gpt2", hardware, {"global_batch_size": 8, "seq_len": 256, **cfg}))
    except st.SimtrainError as err:
        assert str(err)
        return
    assert len(df) == len(hardware)
