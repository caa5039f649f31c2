"""Generators of the readable docs pages whose numbers come from simtrain itself.

    python -m validation.docs_gen            # rewrite docs/formulas.md, docs/seed-examples.md and
                                             # the glossary table of docs/concepts.md
    python -m validation.docs_gen --check    # exit 1 when a page on disk differs from its generation

Every worked number on those pages is the value of a code snippet shown beside it, evaluated through
the simtrain function that implements the formula (:mod:`validation.docs_gen.snippets`); the tests
``tests/unit/test_docs_formulas.py``, ``test_docs_seed.py`` and ``test_docs_concepts.py`` regenerate
the pages and fail when code and doc disagree.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["DOCS", "PAGES", "generate"]

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _formulas() -> str:
    from validation.docs_gen.formulas import formulas_markdown
    return formulas_markdown()


def _seed() -> str:
    from validation.docs_gen.seed import seed_markdown
    return seed_markdown()


def _concepts() -> str:
    from validation.docs_gen.concepts import concepts_with_glossary
    return concepts_with_glossary((DOCS / "concepts.md").read_text(encoding="utf-8"))


PAGES = {"formulas.md": _formulas, "seed-examples.md": _seed, "concepts.md": _concepts}


def generate(page: str) -> str:
    """The text ``docs/<page>`` should hold."""
    return PAGES[page]()
