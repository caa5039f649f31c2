"""docs/seed-examples.md: the chapter's worked examples, each number re-evaluated through simtrain."""

from pathlib import Path

import pytest

from validation.docs_gen import generate
from validation.docs_gen.seed import all_worked
from validation.docs_gen.seed_cases import AREAS
from validation.docs_gen.snippets import parse_markers, value_of

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGE = DOCS / "seed-examples.md"
WORKED = {w.key: w for w in all_worked()}


def test_page_is_generated():
    assert PAGE.read_text(encoding="utf-8") == generate("seed-examples.md"), \
        "regenerate: python -m validation.docs_gen seed-examples.md"


def test_every_marked_number_is_what_the_code_computes():
    marked = parse_markers(PAGE.read_text(encoding="utf-8"))
    assert set(marked) == set(WORKED) and len(WORKED) == len(all_worked())  # keys unique
    for key, number in marked.items():
        got = value_of(WORKED[key])
        assert got == (pytest.approx(number, rel=1e-12) if isinstance(number, float) else number), key


def test_every_chapter_area_is_covered():
    areas = " ".join(a for a, _ in AREAS).lower()
    for area in ("data pipeline", "forward", "backward", "optimizers", "prefetching", "mixed precision",
                 "accumulation", "checkpointing", "data parallelism", "pipeline parallelism", "hybrid",
                 "bottleneck", "gpus", "tpus", "fpgas", "asics"):
        assert area in areas, area


def test_every_disagreement_row_is_reproduced():
    """Each row of docs/chapter-disagreements.md that a snippet can evaluate is cited on the page."""
    rows = {ex.row for _, cases in AREAS for ex in cases if ex.row}
    table = (DOCS / "chapter-disagreements.md").read_text(encoding="utf-8")
    listed = {int(line.split("|")[1]) for line in table.splitlines() if line.startswith("| ") and
              line.split("|")[1].strip().isdigit()}
    assert rows <= listed
    assert listed - rows <= {5, 6, 7, 12}  # shown inside rows 4 and 11's examples


@pytest.mark.parametrize("key, expected", [("utilization-20", 0.2), ("ring-steps", 14), ("naive-messages", 56),
                                           ("adam-100m", 800e6), ("conv-output", 112), ("bottleneck-data", "data")])
def test_key_numbers(key, expected):
    assert value_of(WORKED[key]) == (pytest.approx(expected) if isinstance(expected, float) else expected)
