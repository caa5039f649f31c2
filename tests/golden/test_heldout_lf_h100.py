"""llm-foundry's whole H100 bf16 table (validation/published/heldout_lf_h100.py), held out.

Only that the transcription is whole and every row predicts a finite step: NO accuracy assertion.
These runs are held out; an error bound here would turn them into tuning targets.
"""

import math

from validation.published.heldout import estimate_row, published_step_time_s
from validation.published.heldout_lf_h100 import table_runs


def test_the_transcription_is_whole_and_well_formed():
    runs = table_runs()
    names = [r.name for r in runs]
    assert len(runs) == 52 and len(set(names)) == 52
    for r in runs:  # the README's own identity: global batch = micro-batch x accumulation x GPUs
        assert r.cluster == "dgx-h100" and r.stack == "llm-foundry" and r.nodes * 8 in (8, 16, 32, 64), r.name
        assert r.global_batch_size % (r.micro_batch_size * r.nodes * 8) == 0, r.name
        assert 0 < r.published < 1e6 and r.source.strip(), r.name


def test_the_rows_the_held_out_table_carries_agree_with_it():
    """docs/heldout.md rows 10 and 11 are two rows of this table: same layout, same published value."""
    from validation.published.heldout_rows import HELDOUT_RUNS
    mine = {(r.model, r.seq_len, r.nodes, r.micro_batch_size): r.published for r in table_runs()}
    theirs = [r for r in HELDOUT_RUNS if r.name.startswith("llm-foundry") and r.cluster == "dgx-h100"]
    assert len(theirs) == 2
    for r in theirs:
        assert mine[(r.model, r.seq_len, r.nodes, r.micro_batch_size)] == r.published


def test_every_row_predicts_a_finite_step():
    for run in table_runs()[::7]:  # a spread of models, sequences and GPU counts (the module runs all 52)
        res = estimate_row(run)
        assert math.isfinite(res.predicted_step_s) and res.predicted_step_s > 0, run.name
        assert res.published_step_s == published_step_time_s(run), run.name
