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


def test_no_empty_section_and_no_link_outside_the_repository():
    """The index has no heading without a page under it; no relative link in the index, README.md or
    a docs page points outside the repository (a reader of a clone or a wheel cannot follow it)."""
    root = DOCS.parent
    text = (DOCS / "index.md").read_text(encoding="utf-8")
    sections = re.split(r"^#{2,} .*$", text, flags=re.M)[1:]
    assert all(LINK.search(s) for s in sections), "an empty section in docs/index.md"
    pages = [DOCS / "index.md", root / "README.md", *DOCS.glob("*.md")]
    for page in pages:
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            if "://" in target or target.startswith("mailto:"):
                continue
            resolved = (page.parent / target).resolve()
            assert resolved.is_relative_to(root.resolve()), f"{page.name} links outside the repository: {target}"
