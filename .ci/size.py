"""The package's size as issue 32 measures it: lines, the share of them that are docstrings
(module, class and function), and the modules over 650 lines. ``-v``: every module.

Run: ``python .ci/size.py`` (or ``make size``)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "agent_payload"
DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def docstring_lines(tree: ast.Module) -> int:
    count = 0
    for node in ast.walk(tree):
        if isinstance(node, DOCUMENTED) and ast.get_docstring(node, clean=False) is not None:
            first = node.body[0]
            count += (first.end_lineno or first.lineno) - first.lineno + 1
    return count


def main(argv: list[str]) -> int:
    rows = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        rows.append((len(text.splitlines()), docstring_lines(ast.parse(text)), path))
    if "-v" in argv:
        for lines, docs, path in sorted(rows):
            print(f"{lines:6d} {docs:5d} {path.relative_to(PACKAGE.parent)}")
    total = sum(lines for lines, _, _ in rows)
    docs = sum(d for _, d, _ in rows)
    over = [str(p.relative_to(PACKAGE.parent)) for lines, _, p in rows if lines > 650]
    print(f"agent_payload: {total:,} lines, docstrings {docs:,} ({100 * docs / total:.1f}%)")
    print(f"modules over 650 lines: {', '.join(over) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
