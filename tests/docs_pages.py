"""The documentation the tests read: the README and the MkDocs pages (mkdocs.yml's nav order), as one text.

Commands, examples and named sections moved from the README into docs/ (issue 48: the README as a door); tests
that check what the documentation shows read it all from here."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def pages() -> list[Path]:
    """README.md, then every page mkdocs.yml's nav lists, in its order."""
    nav = re.findall(r":\s*([\w./-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(encoding="utf-8"), re.M)
    return [README, *(DOCS / p for p in nav)]


def docs_text() -> str:
    """Every page's Markdown, joined."""
    return "\n\n".join(p.read_text(encoding="utf-8") for p in pages())


def page_text(name: str) -> str:
    """One page of docs/ (e.g. "layout.md")."""
    return (DOCS / name).read_text(encoding="utf-8")
