"""The layering of SPEC §2 / issue 14, checked by walking every import of every module.

* nothing under ``harness/``, ``evolution/``, ``agent/``, ``llm/``, ``domain/`` imports ``defs``,
  ``cli`` or the benchmarks (``trm_bench``);
* nothing under ``harness/``, ``evolution/``, ``agent/``, ``domain/`` imports ``llm.sim`` (only
  ``llm/`` itself and the composition roots ``cli``/``defs`` — and the benchmarks — may);
  ``llm/sim_config.py`` is the ``sim:`` config schema (data) and may be imported by the config;
* ``domain/`` imports nothing of the project but ``domain``.

Imports are read from the source (``ast``), including those inside functions: a lazy import is
still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "trm_assets"

LOWER = ("harness", "evolution", "agent", "llm", "domain")
NO_SIM = ("harness", "evolution", "agent", "domain")
BELOW_HARNESS = ("evolution", "agent", "llm", "domain")
UPPER = ("trm_assets.defs", "trm_assets.cli", "trm_assets.definitions", "trm_bench")


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    pkg = (
        _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    )
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative import
                base = pkg.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            out.append((node.lineno, mod))
            out.extend((node.lineno, f"{mod}.{a.name}") for a in node.names)
    return out


def _under(mod: str, prefix: str) -> bool:
    return mod == prefix or mod.startswith(prefix + ".")


def layer_violations(pkg_root: Path = PKG) -> list[str]:
    """One line per (file, line, rule) broken."""
    bad: dict[tuple[str, int, str], str] = {}
    for path in sorted(pkg_root.rglob("*.py")):
        mod = _module_name(path)
        layer = mod.split(".")[1] if mod.count(".") >= 1 else ""
        for line, imp in _imports(path):
            where = f"{path.relative_to(ROOT)}:{line} imports {imp}"

            def report(rule: str, where: str = where, line: int = line, p: Path = path) -> None:
                bad.setdefault((str(p), line, rule), f"{where} ({rule})")

            if layer in LOWER and any(_under(imp, u) for u in UPPER):
                report("a lower layer importing defs/cli/benchmarks")
            if layer in BELOW_HARNESS and _under(imp, "trm_assets.harness"):
                report("a layer below the harness importing it")
            if (
                layer in NO_SIM
                and _under(imp, "trm_assets.llm.sim")
                and not _under(imp, "trm_assets.llm.sim_config")
            ):
                report("the loop importing the simulator")
            if (
                layer == "domain"
                and _under(imp, "trm_assets")
                and not _under(imp, "trm_assets.domain")
            ):
                report("the kernel importing the project")
    return list(bad.values())


def test_layering_holds_with_no_exception() -> None:
    assert layer_violations() == []


def test_the_walker_sees_violations(tmp_path: Path) -> None:
    """The check can fail: a planted upward import and a planted simulator import are reported."""
    fake = tmp_path / "trm_assets"
    (fake / "harness").mkdir(parents=True)
    (fake / "domain").mkdir()
    (fake / "harness" / "bad.py").write_text(
        "def f():\n    from trm_assets.defs import jobs\n    import trm_assets.llm.sim.world\n"
        "from trm_assets.llm.sim_config import SimConfig\n"
    )
    (fake / "domain" / "k.py").write_text("from ..harness import bad\n")
    global ROOT
    old = ROOT
    ROOT = tmp_path
    try:
        found = layer_violations(fake)
    finally:
        ROOT = old
    assert len(found) == 4, found
    assert any("below the harness" in f for f in found)
    assert any("imports trm_assets.defs" in f for f in found)
    assert any("imports trm_assets.llm.sim.world" in f for f in found)
    assert any("kernel importing" in f and "trm_assets.harness" in f for f in found)
    assert not any("sim_config" in f for f in found)


@pytest.mark.parametrize("name", ["harness", "evolution", "agent", "llm", "domain"])
def test_lower_layers_exist(name: str) -> None:
    assert (PKG / name).is_dir()
