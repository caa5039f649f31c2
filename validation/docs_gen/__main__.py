"""``python -m validation.docs_gen [--check] [PAGE ...]``: write (or check) the generated docs pages."""

from __future__ import annotations

import argparse
import sys

from validation.docs_gen import DOCS, PAGES, generate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m validation.docs_gen", description=__doc__)
    parser.add_argument("pages", nargs="*", help=f"pages to write, of {sorted(PAGES)} (default: all)")
    parser.add_argument("--check", action="store_true", help="exit 1 when a page differs; write nothing")
    args = parser.parse_args(argv)
    unknown = [p for p in args.pages if p not in PAGES]
    if unknown:
        parser.error(f"unknown page(s) {unknown}; choose from {sorted(PAGES)}")
    stale = []
    for page in args.pages or list(PAGES):
        text = generate(page)
        path = DOCS / page
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(page)
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    for page in stale:
        print(f"docs/{page} is out of date: run python -m validation.docs_gen {page}", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
