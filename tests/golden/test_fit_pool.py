"""The fit pool translated (validation/published/pool.py) and the prior fit (fit_priors.py) recovering
planted knobs. No accuracy bound on the pool itself: the shipped presets come from this fit, and
docs/fit-pool.md reports its leave-one-source-out errors."""

from __future__ import annotations

import dataclasses
import math

import pytest

from validation.published import fit_priors
from validation.published.pool import pool_runs, skipped


def test_every_record_is_translated_or_left_out_with_a_reason():
    runs, left = pool_runs(), skipped()
    assert len(runs) == 90 and len(left) == 13  # 81 of 94 records + 9 of the NeMo 24.07 table's 12 rows
    assert {s for s, _ in runs} == {"mpt", "torchtitan", "megascale", "mtnlg", "bloom", "nemo"}
    assert all(len(why) > 20 for _, why in left)
    from validation.published.heldout_rows import NEMO_LEFT_OUT, NEMO_TABLE_ROWS
    nemo = {run.name for s, run in runs if s == "nemo"}
    assert len(nemo) == 9 and {r.name for r in NEMO_TABLE_ROWS} <= nemo
    assert all(len(why) > 20 for _, why in NEMO_LEFT_OUT)  # GPT3-20B, GPT3-175B on 512 GPUs, Nemotron-340B


def test_mpt_checkpointing_follows_the_torch_each_table_row_ran_on():
    """The Oct 2023 sweep (PyTorch 2.1 image) re-ran every A100-80GB row but the two 70B ones, whose
    numbers it carried over from the PyTorch 1.13.1 table: only those recompute the whole block."""
    import simtrain as st
    from validation.published.heldout import stack_of_run
    stacks = {run.name: stack_of_run(run) for source, run in pool_runs() if source == "mpt" and run.recompute == "full"}
    ac = {name: (st.load_stack(s) if isinstance(s, str) else s).recompute_early_stop for name, s in stacks.items()}
    old = {name for name, early in ac.items() if not early}
    assert old == {"mpt_a10080gb_bf16_70b_seq2048_64gpu_mb8_ga4", "mpt_a10080gb_bf16_70b_seq2048_32gpu_mb2_ga16"}
    assert len(ac) == 22


def test_translated_rows_estimate():
    rows = fit_priors.load_rows({"torchtitan", "mtnlg", "bloom"})
    for row in rows:
        assert math.isfinite(fit_priors.predict(row, {})) and row.published_s > 0


def test_fit_recovers_planted_knobs():
    """Rows whose 'published' time is the prediction with idle 0.2: the stack's fit finds 0.2 and leaves
    the knobs the rows do not ask for out."""
    rows = fit_priors.load_rows({"torchtitan"})
    planted = {"idle_gap_fraction": 0.2}
    synthetic = [dataclasses.replace(r, published_s=fit_priors.predict(r, planted)) for r in rows]
    knobs, err = fit_priors._fit_stack(synthetic, {})
    assert knobs["idle_gap_fraction"] == pytest.approx(0.2, rel=0.02)
    assert knobs.get("kernel_gap_s", 0.0) < 1e-6


def test_a_written_preset_keeps_one_value_per_knob_and_rewrites_the_same():
    text = "spec: stack\nname: x\ncomm_compute_slowdown: 0.0\nzero_stage: 3\n"
    knobs = {"idle_gap_fraction": 0.1, "comm_compute_slowdown": 0.3}
    once = fit_priors._strip_fitted(text, knobs) + fit_priors._fitted_block(knobs, {"idle_gap_fraction": 0.01}, 5)
    twice = fit_priors._strip_fitted(once, knobs) + fit_priors._fitted_block(knobs, {"idle_gap_fraction": 0.01}, 5)
    assert once == twice
    import yaml
    doc = yaml.safe_load(once)
    assert doc["comm_compute_slowdown"] == 0.3 and doc["idle_gap_fraction"] == 0.1
    assert once.count("\ncomm_compute_slowdown:") == 1 and "5 public runs" in doc["realisation_source"]


def test_shipped_presets_name_the_fit_pool():
    import simtrain as st
    for name in ("deepspeed", "fsdp2", "llm-foundry", "megatron-core"):
        assert st.load_stack(name).realisation_source.startswith("fit pool")
    assert st.load_stack("reference").realisation_source == ""


def test_row_table_puts_each_left_out_error_on_its_own_row():
    """Two sources interleaved in load order: each source's left-out errors (in its rows' order) land
    on its rows, the fitted errors on every row; without leave-one-source-out the column is a dash."""
    from types import SimpleNamespace

    def row(source, name, s):
        return fit_priors.PoolRow(source, SimpleNamespace(name=name), None, None, None, s)
    rows = [row("a", "a1", 2.0), row("b", "b1", 3.0), row("a", "a2", 4.0)]
    lines = fit_priors.row_table(rows, [0.01, -0.02, 0.03], {"a": [0.10, 0.30], "b": [-0.20]})
    assert len(lines) == 4
    assert lines[1].split()[-2:] == ["+1.0%", "+10.0%"] and lines[1].startswith("a ")
    assert lines[2].split()[-2:] == ["-2.0%", "-20.0%"] and " b1 " in lines[2]
    assert lines[3].split()[-2:] == ["+3.0%", "+30.0%"] and " a2 " in lines[3]
    assert fit_priors.row_table(rows, [0.0, 0.0, 0.0], None)[2].split()[-1] == "—"
