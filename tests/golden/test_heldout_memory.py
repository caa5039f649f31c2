"""The held-out memory rows (validation/published/heldout_memory.py, docs/heldout.md "Memory").

Only well-formedness and "every row predicts a finite peak of the stated kind": NO accuracy
assertion. These runs are held out; an error bound here would turn them into tuning targets.
"""

import math

import pytest

import simtrain as st
from validation.published.heldout_memory import GIB, MEMORY_ROWS, predict_row


def test_the_table_is_well_formed():
    names = [row.name for row in MEMORY_ROWS]
    assert len(names) == len(set(names)) and names
    for row in MEMORY_ROWS:
        assert row.kind in ("reserved", "allocated"), row.name
        assert 0 < row.published_gib < 1024, row.name
        assert row.stack in st.stack_names() and row.source.strip(), row.name
        assert all(isinstance(a, str) and a.strip() for a in row.assumptions), row.name


@pytest.mark.parametrize("row", MEMORY_ROWS, ids=lambda row: row.name)
def test_every_row_predicts_the_peak_of_its_kind(row):
    res = predict_row(row)
    m = res.report.memory
    assert m is not None and math.isfinite(res.predicted_gib) and res.predicted_gib > 0
    want = m.reserved_bytes if row.kind == "reserved" else m.total_bytes
    assert res.predicted_gib == want / GIB
    assert math.isfinite(res.error)
