"""Issue 14: no module over ≈ 400 lines without a sentence in its docstring saying why."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 400
WHY = "Why it is long"


def test_every_long_module_says_why() -> None:
    files = sorted([*(ROOT / "trm_assets").rglob("*.py"), *(ROOT / "trm_bench").rglob("*.py")])
    assert len(files) > 50  # the walk found the packages
    silent = []
    for f in files:
        text = f.read_text(encoding="utf-8")
        if text.count("\n") > LIMIT:
            doc = ast.get_docstring(ast.parse(text, str(f))) or ""
            if WHY not in doc:
                silent.append(f"{f.relative_to(ROOT)} ({text.count(chr(10))} lines)")
    assert not silent, f"modules over {LIMIT} lines whose docstring has no {WHY!r}: {silent}"
