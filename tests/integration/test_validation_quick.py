"""The validation suite's quick mode end to end on this machine (tiny zoo, 2 repeats, tiny measurement
grid at 1 thread, 2 DDP models, 3 loader settings), written to a temporary directory.

Only bounds a noisy 2-core machine always meets are asserted. Step time: within a factor of 10 of the
measured step — the tiny models' steps are a few ms of per-op framework cost, and the same host runs
2× slower from one minute to the next (validation/sentinel.py), so a tighter bound would fail on
noise; a factor of 10 still catches a missing term, a unit slip or a broken calibration, which are
orders of magnitude. The counting metrics are exact or nearly so, and asserted that way: FLOPs equal
FlopCounterMode's (the documented grouped-convolution excess removed), the op records' saved bytes
within 1 % of the saved-tensor hooks (the estimator's own activation total within 5 %: it leaves out
batch-norm statistics, ≈ 3 % of the tiny ResNet's saved bytes).
"""

from __future__ import annotations

import json
import time

import pytest

torch = pytest.importorskip("torch")

from validation.report import METRICS, load_cases  # noqa: E402
from validation.suite import quick_config, run_suite  # noqa: E402
from validation.zoo import ZOO  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.slow, pytest.mark.solo]  # it times the machine


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("validation")
    start = time.perf_counter()
    result = run_suite(quick_config(out_dir=out, command="pytest quick"), log=lambda _m: None)
    return result, out, time.perf_counter() - start


def _cases(result, metric):
    return [c for c in result.cases if c.metric == metric]


def test_every_zoo_model_has_every_single_device_metric(quick):
    result, _, _ = quick
    for metric in ("step_time", "step_time_plain"):
        assert sorted(c.case.split("/")[0] for c in _cases(result, metric)) == sorted(ZOO), metric
    for metric in ("flops", "saved_bytes"):  # the unseen set (validation/unseen.py) is counted too
        assert set(ZOO) <= {c.case.split("/")[0] for c in _cases(result, metric)}, metric
    assert not _cases(result, "peak_memory")  # CPU: not compared, and the report says so


def test_step_time_within_a_factor_of_ten(quick):
    """Alone on a 2-core Xeon VM (2026-12-06) every zoo model came out at 0.89-1.38 of its measured
    step; the bounds leave the VM's minute-to-minute drift room. The module runs ``solo``
    (tests/solo_lock.py): the other xdist worker's tests loaded a core in one phase and not the other.
    Two model faults put resnet18 at 5.3 and 10.1 (CI) before: the cold-call bench timed its call
    straight after a 1 GB read, and each imported layer was its own kernel signature. A unit slip or
    a missing term is still far off."""
    result, _, _ = quick
    for c in _cases(result, "step_time"):
        assert c.measured > 0 and c.predicted > 0, c
        assert 0.05 < c.predicted / c.measured < 10, c


def test_flops_exact_and_saved_bytes_close(quick):
    result, _, _ = quick
    for c in _cases(result, "flops"):
        assert c.predicted == pytest.approx(c.measured, rel=1e-9), c
    for c in _cases(result, "saved_bytes"):
        assert c.detail["op_records_saved_bytes"] == pytest.approx(c.measured, rel=0.01), c
        assert c.predicted == pytest.approx(c.measured, rel=0.05), c


def test_ddp_and_pipeline_cases_are_real(quick):
    result, _, _ = quick
    ddp = _cases(result, "ddp_step")
    assert len(ddp) == 4 and len(_cases(result, "allreduce")) == 2
    assert all(c.measured > 0 and c.predicted > 0 and c.detail["feasible"] for c in ddp)
    loader = _cases(result, "pipeline_throughput")
    assert len(loader) == 3
    # a loader with 0 workers is serial: its throughput is below the compute-only rate batch / compute_s
    serial = next(c for c in loader if c.case.startswith("loader w0"))
    assert serial.measured < 8 / 10e-3


def test_report_files_written_and_consistent(quick):
    result, out, elapsed = quick
    slug = result.slug
    for suffix in ("json", "md", "png"):
        assert (out / f"{slug}.{suffix}").stat().st_size > 0
    cases, meta = load_cases(out / f"{slug}.json")
    assert len(cases) == len(result.cases)
    assert meta["calibration"]["measurements_hash"] and meta["machine"]["cpu_cores"] >= 1
    assert set(json.loads((out / f"{slug}.json").read_text())["summary"]) <= set(METRICS)
    md = (out / f"{slug}.md").read_text()
    assert "MAPE" in md and "peak_memory is not compared on CPU" in md
    assert (out / f"{slug}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert elapsed < 300  # the budget is 90 s on 2 cores; this bound only catches a runaway


def test_cli_validate_rejects_unknown_models(capsys):
    from simtrain.cli import main
    assert main(["validate", "--quick", "--models", "mlp,nope"]) == 2
    assert "unknown models ['nope']" in capsys.readouterr().err
