"""The documentation the tests read: the README (the front page) and the guides in docs/."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
FILES = [README, *sorted((ROOT / "docs").glob("*.md"))]


def docs_text() -> str:
    """The README and every guide, one after another."""
    return "\n".join(path.read_text(encoding="utf-8") for path in FILES)


def block(marker: str, language: str = "python") -> str:
    """The code block marked ``<!-- marker -->`` in the README or a guide."""
    match = re.search(rf"<!-- {marker} -->\s*```{language}\n(.*?)```", docs_text(), re.DOTALL)
    assert match is not None, f"no <!-- {marker} --> {language} block in README.md or docs/"
    return match.group(1)
