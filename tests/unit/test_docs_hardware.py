"""docs/hardware.md and docs/hardware-comparison.md are generated from the specs and cannot rot."""

from pathlib import Path

import pytest

from simtrain.report.compare import comparison_markdown, hardware_markdown
from simtrain.specs.library import library_names

DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.mark.parametrize(("page", "make", "kind"), [("hardware.md", hardware_markdown, "hardware"),
                                                     ("hardware-comparison.md", comparison_markdown, "comparison")])
def test_page_is_generated_from_the_specs(page, make, kind):
    assert (DOCS / page).read_text(encoding="utf-8") == make(), \
        f"regenerate: python -m simtrain.report.compare {kind} > docs/{page}"


def test_comparison_has_a_row_and_a_source_per_device():
    text = comparison_markdown()
    for name in library_names("device"):
        row = next(line for line in text.splitlines() if line.startswith(f"| {name} |"))
        assert "peak " in row.rsplit("|", 2)[-2]  # the last cell: the spec's sources
    # the FPGAs list no bf16 peak: the row says so instead of a number
    assert "| alveo-u280 | fpga | cannot run |" in text and "no bf16" in text
