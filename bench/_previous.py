"""quotaql as of an earlier commit, importable beside today's: the baseline of an A/B in one run.

``load()`` extracts ``src/quotaql`` at ``commit`` (``git archive``) into a temporary directory
as the package ``quotaql_before`` (every ``quotaql`` name in it renamed), so that one process
can time today's code and the earlier code in turns, on the same data.
"""

from __future__ import annotations

import importlib
import io
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from types import ModuleType

__all__ = ["BEFORE_GATE", "load"]

#: The last commit before the request gate (quotaql.gate): CostLimiter did everything itself.
BEFORE_GATE = "e3af8cd"
REPO = Path(__file__).resolve().parents[1]
_NAME = re.compile(r"\bquotaql\b")


def load(commit: str = BEFORE_GATE, name: str = "quotaql_before") -> ModuleType:
    """The package ``name``: ``src/quotaql`` as of ``commit``."""
    if name in sys.modules:
        return sys.modules[name]
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", commit, "src/quotaql"],
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout
    directory = Path(tempfile.mkdtemp(prefix=f"{name}-"))
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(directory, filter="data")
    package = directory / name
    shutil.move(directory / "src" / "quotaql", package)
    for path in package.rglob("*.py"):
        path.write_text(_NAME.sub(name, path.read_text(encoding="utf-8")), encoding="utf-8")
    sys.path.insert(0, str(directory))
    return importlib.import_module(name)
