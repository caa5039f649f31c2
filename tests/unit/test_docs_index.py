"""docs/index.md links every page of docs/ (and docs/devices/README.md), and every link resolves."""

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _links() -> set[str]:
    return set(LINK.findall((DOCS / "index.md").read_text(encoding="utf-8")))


def test_every_page_is_linked():
    pages = {p.name for p in DOCS.glob("*.md")} - {"index.md"}
    if (DOCS / "devices" / "README.md").exists():
        pages.add("devices/README.md")
    missing = pages - _links()
    assert not missing, f"add to docs/index.md: {sorted(missing)}"


def test_every_link_resolves():
    for target in _links():
        if "://" not in target:
            assert (DOCS / target).exists(), target
