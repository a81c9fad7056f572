"""The Python snippets of the README and docs/, for the tests that run them.

A snippet is a block fenced ```` ```python ````. One fenced ```` ```python graphene ````
needs Graphene, which needs graphql-core 3.2: the main environment cannot run it, so
tests/adapters/graphene3 runs it (in ``make pytest-gql32``) after the snippets above it on its
page.
"""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: What a snippet may need beyond the main environment (None: nothing).
NEEDS = (None, "graphene")
#: A block fenced ```` ```python file:<path> ```` is a whole file of the repository shown on
#: its page (docs/production.md's app): the test of that file runs it, and checks the copy.
FILE = "file:"
_BLOCK = re.compile(r"^```python(?: (?P<needs>\S+))?\n(?P<code>.*?)^```", re.DOTALL | re.MULTILINE)


class Snippet(NamedTuple):
    where: str  # path:line
    code: str
    needs: str | None


def snippets(paths: list[Path] = DOCS) -> list[Snippet]:
    """Every Python snippet of ``paths``, in order."""
    found = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        for match in _BLOCK.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            where = f"{path.relative_to(ROOT)}:{line}"
            found.append(Snippet(where, match.group("code"), match.group("needs")))
    return found


def run(code: str, where: str, module: types.ModuleType) -> None:
    """Run one snippet in ``module``'s namespace."""
    exec(compile(code, where, "exec"), module.__dict__)


def new_module(name: str, monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """A real module, in sys.modules for the test: Strawberry resolves annotations there."""
    module = types.ModuleType(f"snippet_{abs(hash(name))}")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return module
