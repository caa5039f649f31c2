"""The held-out set of public training runs (validation/published/heldout.py, docs/heldout.md).

Only well-formedness and "every row estimates": NO accuracy assertion. These runs are held out; an
error bound here would turn them into tuning targets.
"""

import math

import pytest

import simtrain as st
from validation.published.heldout import (
    HELDOUT_RUNS,
    METRICS,
    cluster_of,
    config_of,
    estimate_row,
    mape_by_stack,
    published_step_time_s,
    run_heldout,
)


def test_the_table_is_well_formed():
    names = [run.name for run in HELDOUT_RUNS]
    assert len(names) == len(set(names)) and len(names) >= 6
    assert len({run.stack for run in HELDOUT_RUNS}) >= 3
    for run in HELDOUT_RUNS:
        assert run.metric in METRICS, run.name
        assert run.published > 0 and math.isfinite(run.published), run.name
        assert run.source.strip() and run.definition.strip(), run.name
        assert run.stack in st.stack_names(), run.name
        assert all(isinstance(a, str) and a.strip() for a in run.assumptions), run.name


@pytest.mark.parametrize("run", HELDOUT_RUNS, ids=lambda run: run.name)
def test_every_row_builds_and_converts(run):
    model = st.load_model(run.model)
    cluster = cluster_of(run)
    assert cluster.nodes_count == run.nodes
    config_of(run)                      # validates the layout fields
    step = published_step_time_s(run, model)
    assert step > 0 and math.isfinite(step)


def test_every_row_estimates_feasible_or_with_reasons():
    results = run_heldout()
    assert len(results) == len(HELDOUT_RUNS)
    for res in results:
        assert res.predicted_step_s > 0 and math.isfinite(res.predicted_step_s), res.run.name
        assert res.feasible or res.reasons, res.run.name
        assert math.isfinite(res.error), res.run.name
    summary = mape_by_stack(results)
    assert "overall" in summary and all(math.isfinite(v) for v in summary.values())


def test_estimate_row_is_deterministic():
    run = HELDOUT_RUNS[0]
    assert estimate_row(run).predicted_step_s == estimate_row(run).predicted_step_s


def test_one_shot_groups_by_preset_or_by_the_framework_that_ran():
    # structure only: Meta's stack and fms-fsdp leave their presets' groups when grouped by framework
    from validation.published.heldout import framework_of, one_shot_groups
    results = run_heldout()
    by_stack, by_framework = one_shot_groups(results), one_shot_groups(results, by="framework")
    assert "megatron-core on h100" in by_stack and "meta-4d on h100" in by_framework
    count = {g: len(entries) for g, entries in by_framework.items()}
    assert count["megatron-core on h100"] == len(by_stack["megatron-core on h100"]) - 2
    assert all(framework_of(r) == r.stack for r in HELDOUT_RUNS if r.framework is None)
    with pytest.raises(ValueError, match="by must be"):
        one_shot_groups(results, by="gpu")
