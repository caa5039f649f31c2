"""docs/formulas.md: every worked number is the value of its snippet through the simtrain function that
implements the formula, and agrees with the source's closed form (validation/docs_gen/formulas.py)."""

import math
from pathlib import Path

import pytest

from validation.docs_gen import generate
from validation.docs_gen.formulas import FORMULAS, all_worked
from validation.docs_gen.snippets import paper_of, parse_markers, value_of

PAGE = Path(__file__).resolve().parents[2] / "docs" / "formulas.md"
WORKED = {w.key: w for w in all_worked()}


def test_page_is_generated():
    assert PAGE.read_text(encoding="utf-8") == generate("formulas.md"), \
        "regenerate: python -m validation.docs_gen formulas.md"


def test_every_marked_number_is_what_the_code_computes():
    marked = parse_markers(PAGE.read_text(encoding="utf-8"))
    assert set(marked) == set(WORKED)
    for key, number in marked.items():
        assert value_of(WORKED[key]) == pytest.approx(number, rel=1e-12), key


@pytest.mark.parametrize("key", [w.key for w in all_worked() if w.paper is not None])
def test_code_agrees_with_the_source_closed_form(key):
    w = WORKED[key]
    assert math.isclose(value_of(w), paper_of(w), rel_tol=w.rel), (key, value_of(w), paper_of(w))


def test_every_formula_named_in_the_issue_is_on_the_page():
    titles = " ".join(f.title for f in FORMULAS)
    for word in ("Megatron", "PaLM", "Activation memory", "ZeRO", "bus bandwidth", "Pipeline bubble",
                 "Input pipeline", "Roofline", "Optimizer", "Checkpoint interval", "Energy"):
        assert word in titles, word
    text = PAGE.read_text(encoding="utf-8")
    for function in ("model_flops", "palm_flops_per_token", "activation_bytes_per_microbatch", "param_memory",
                     "bus_bandwidth_factor", "bubble_fraction", "pipeline_times", "op_seconds", "step_passes",
                     "young_interval_s", "daly_interval_s", "energy_kwh"):
        assert f"{function}(" in text, function
