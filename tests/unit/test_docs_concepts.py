"""docs/concepts.md: the glossary table is generated from simtrain/glossary.py and names every member."""

import re
from pathlib import Path

from validation.docs_gen import generate
from validation.docs_gen.concepts import MEANINGS, glossary_enums

PAGE = Path(__file__).resolve().parents[2] / "docs" / "concepts.md"


def test_glossary_table_is_generated():
    assert PAGE.read_text(encoding="utf-8") == generate("concepts.md"), \
        "regenerate: python -m validation.docs_gen concepts.md"


def test_every_glossary_member_has_a_meaning_and_appears():
    text = PAGE.read_text(encoding="utf-8")
    members = {f"{e.__name__}.{m.value}" for e in glossary_enums() for m in e}
    assert members == set(MEANINGS)
    for enum in glossary_enums():
        assert f"| **{enum.__name__}** |" in text
        for member in enum:
            assert f"| `{member.value}` | {MEANINGS[f'{enum.__name__}.{member.value}']} |" in text


def test_the_modules_the_page_names_exist():
    """Every `simtrain/...` path the page names is a file or folder of the checkout."""
    root = PAGE.parents[1]
    paths = set(re.findall(r"`(simtrain/[\w/]+(?:\.py)?)", PAGE.read_text(encoding="utf-8")))
    assert len(paths) > 20
    for path in paths:
        assert (root / path).exists(), path
