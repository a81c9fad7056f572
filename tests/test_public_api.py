"""Every import path the documentation shows still works: the ``import`` statements of the
README, docs/ and examples/, the dotted names they mention (``quotaql.gate.Gate``), and what
each public package says it exports (``__all__``)."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = sorted(
    [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "examples").rglob("*.md")]
)
EXAMPLES = sorted((ROOT / "examples").rglob("*.py"))

# A whole ``from quotaql... import ...`` statement (parenthesised names may span lines).
_FROM = re.compile(r"^[ \t>]*from (quotaql(?:\.\w+)*) import (\([^)]*\)|[^\n#]+)", re.MULTILINE)
_IMPORT = re.compile(r"^[ \t>]*import (quotaql(?:\.\w+)*)(?: as \w+)?\s*$", re.MULTILINE)
# A dotted name in prose or code: quotaql.module.Name (a class or a constant).
_DOTTED = re.compile(r"\bquotaql((?:\.[a-z_][a-z0-9_]*)+)\.([A-Z][A-Za-z0-9_]*)\b")


def _names(imported: str) -> list[str]:
    names = []
    for part in imported.strip().strip("()").split(","):
        name = part.split("#")[0].strip().split(" as ")[0].strip()
        if name.isidentifier():
            names.append(name)
    return names


def documented_imports() -> set[tuple[str, str | None]]:
    """(module, name) for each name imported from quotaql in the docs and examples; name
    None for a plain ``import quotaql.x``."""
    found: set[tuple[str, str | None]] = set()
    for path in DOCUMENTS:
        text = path.read_text(encoding="utf-8")
        for module, imported in _FROM.findall(text):
            found.update((module, name) for name in _names(imported))
        found.update((module, None) for module in _IMPORT.findall(text))
    for path in EXAMPLES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("quotaql"):
                found.update((node.module or "", alias.name) for alias in node.names)
            elif isinstance(node, ast.Import):
                found.update(
                    (alias.name, None) for alias in node.names if alias.name.startswith("quotaql")
                )
    return found


def documented_names() -> set[str]:
    """The dotted names (``quotaql.asgi.BodyLimit``) the docs and examples mention."""
    found: set[str] = set()
    for path in [*DOCUMENTS, *EXAMPLES]:
        for module, name in _DOTTED.findall(path.read_text(encoding="utf-8")):
            found.add(f"quotaql{module}.{name}")
    return found


IMPORTS = sorted(documented_imports(), key=lambda pair: (pair[0], pair[1] or ""))
NAMES = sorted(documented_names())


def test_the_docs_show_imports_to_check() -> None:
    modules = {module for module, _ in IMPORTS}
    # The faces the issue names, at least: if the scan found none, it is broken.
    for face in ("quotaql", "quotaql.plugin", "quotaql.gate", "quotaql.storage.redis"):
        assert face in modules, face
    assert len(IMPORTS) > 40
    assert len(NAMES) > 5


@pytest.mark.parametrize(("module", "name"), IMPORTS, ids=str)
def test_a_documented_import_works(module: str, name: str | None) -> None:
    imported = importlib.import_module(module)
    if name is not None and name != "*":
        assert hasattr(imported, name) or importlib.util.find_spec(f"{module}.{name}"), (
            f"from {module} import {name}"
        )


@pytest.mark.parametrize("dotted", NAMES)
def test_a_documented_dotted_name_resolves(dotted: str) -> None:
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):  # the longest module prefix
        try:
            value: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            value = getattr(value, attribute)
        return
    raise AssertionError(f"{dotted}: no module")


PUBLIC = (
    "quotaql",
    "quotaql.gate",
    "quotaql.limiter",
    "quotaql.storage",
    "quotaql.policy",
    "quotaql.config",
    "quotaql.cost_analysis",
    "quotaql.plugin",
    "quotaql.instrumentation.metrics",
)


@pytest.mark.parametrize("module", PUBLIC)
def test_what_a_public_package_exports_exists(module: str) -> None:
    imported = importlib.import_module(module)
    exported = getattr(imported, "__all__", ())
    assert exported, f"{module} has no __all__"
    missing = [name for name in exported if not hasattr(imported, name)]
    assert not missing, f"{module}.__all__ names what it lacks: {missing}"


def test_the_package_exports_the_gate_and_the_configuration() -> None:
    import quotaql
    from quotaql.config import Config, load_config
    from quotaql.gate import Gate

    assert (quotaql.Gate, quotaql.load_config, quotaql.Config) == (Gate, load_config, Config)
    assert {"Gate", "load_config", "Config"} <= set(quotaql.__all__)
    with pytest.raises(AttributeError, match="no attribute 'Gat'"):
        quotaql.Gat  # noqa: B018
