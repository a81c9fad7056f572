"""The README's first snippet, run as a reader runs it: copied into a file, `python file.py`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import quotaql
from tests.support.docs import ROOT, snippets

SOURCE = str(Path(quotaql.__file__).resolve().parents[1])


def test_the_first_readme_snippet_runs_as_is_and_prints_nothing(tmp_path):
    first = snippets([ROOT / "README.md"])[0]
    script = tmp_path / "first.py"
    script.write_text(first.code, encoding="utf-8")

    # -W default shows every warning once; logging's last-resort handler prints WARNING lines
    done = subprocess.run(
        [sys.executable, "-W", "default", str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": SOURCE},
    )

    assert done.returncode == 0, done.stderr
    assert (done.stdout, done.stderr) == ("", "")
