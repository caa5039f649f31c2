"""llm-foundry's whole H100 bf16 and A100 40GB tables (validation/published/heldout_llm_foundry.py), held out.

Only that the transcriptions are whole and every row predicts a finite step: NO accuracy assertion.
These runs are held out; an error bound here would turn them into tuning targets.
"""

import math

import pytest

from validation.published.heldout import estimate_row, published_step_time_s
from validation.published.heldout_llm_foundry import TABLES, table_runs

ROWS = {"h100-bf16": 52, "a100-40gb": 78}


@pytest.mark.parametrize("name", sorted(TABLES))
def test_the_transcription_is_whole_and_well_formed(name):
    runs = table_runs(name)
    names = [r.name for r in runs]
    assert len(runs) == ROWS[name] and len(set(names)) == len(names)
    for r in runs:  # the README's own identity: global batch = micro-batch x accumulation x GPUs
        assert r.cluster == TABLES[name].cluster and r.stack == "llm-foundry", r.name
        assert r.global_batch_size % (r.micro_batch_size * r.nodes * 8) == 0, r.name
        assert 0 < r.published < 1e6 and r.source.strip(), r.name


def test_the_rows_the_held_out_table_carries_agree_with_the_tables():
    """docs/heldout.md rows 10, 11 and 14 are rows of these tables: same layout, same published value."""
    from validation.published.heldout_rows import HELDOUT_RUNS
    mine = {(r.cluster, r.model, r.seq_len, r.nodes, r.micro_batch_size): r.published
            for name in TABLES for r in table_runs(name)}
    theirs = [r for r in HELDOUT_RUNS if r.name.startswith("llm-foundry") and r.cluster in ("dgx-h100", "dgx-a100-40gb")]
    assert len(theirs) == 3
    for r in theirs:
        assert mine[(r.cluster, r.model, r.seq_len, r.nodes, r.micro_batch_size)] == r.published, r.name
        assert dict(r.stack_knobs).get("recompute_early_stop", True) == (r.cluster == "dgx-h100"), r.name


@pytest.mark.parametrize("name", sorted(TABLES))
def test_every_row_predicts_a_finite_step(name):
    for run in table_runs(name)[::9]:  # a spread of models, sequences and GPU counts (the module runs all)
        res = estimate_row(run)
        assert math.isfinite(res.predicted_step_s) and res.predicted_step_s > 0, run.name
        assert res.published_step_s == published_step_time_s(run), run.name
