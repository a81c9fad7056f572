"""What imports what inside quotaql, read from the source (no module is imported): the one
walk the tests of layers, cycles and reach share."""

from __future__ import annotations

import ast
from pathlib import Path

import quotaql

SOURCE = Path(quotaql.__file__).parent.parent


def module_paths() -> dict[str, Path]:
    """Each quotaql module's dotted name (``quotaql.gate.core``; a package is its
    ``__init__``) and its file."""
    paths = {}
    for path in (SOURCE / "quotaql").rglob("*.py"):
        parts = path.relative_to(SOURCE).with_suffix("").parts
        paths[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return paths


def import_graph() -> dict[str, set[str]]:
    """The quotaql modules each quotaql module imports, wherever the import is written (at
    module level, in a function, under ``TYPE_CHECKING``); ``from a import b`` imports
    ``a.b`` when that is a module, else ``a``."""
    paths = module_paths()
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from this package, or one above it
                    anchor = package.rsplit(".", node.level - 1)[0]
                    base = f"{anchor}.{base}" if base else anchor
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    targets.add(full if full in paths else base)
        graph[name] = (targets & paths.keys()) - {name}
    return graph
