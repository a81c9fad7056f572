"""The wheel and the sdist, built from this checkout by the project's build backend
(hatchling, which pip installs from the configured index), hold what a user is promised:
the license, the project URLs, the docs."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("build")
    backend, out = where / "hatchling", where / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--target", str(backend), "hatchling"],
        check=True,
        capture_output=True,
        timeout=300,
    )
    subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-d", str(out)],
        cwd=ROOT,
        env={"PYTHONPATH": str(backend), "PATH": "/usr/bin:/bin"},
        check=True,
        capture_output=True,
        timeout=300,
    )
    return out


def test_the_wheel_holds_the_license_and_the_project_urls(dist: Path) -> None:
    (wheel,) = dist.glob("quotaql-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = next(
            name.rpartition("/")[0] for name in names if name.endswith(".dist-info/METADATA")
        )
        license_text = archive.read(f"{info}/licenses/LICENSE").decode()
        metadata = Parser().parsestr(archive.read(f"{info}/METADATA").decode())
    assert license_text == (ROOT / "LICENSE").read_text()
    assert license_text.startswith("MIT License\n\nCopyright (c) 2026 the quotaql authors\n")
    assert metadata["License-Expression"] == "MIT"
    assert metadata.get_all("License-File") == ["LICENSE"]
    urls = dict(url.split(", ", 1) for url in metadata.get_all("Project-URL") or [])
    assert urls == {
        "Homepage": "https://github.com/quotaql/quotaql",
        "Documentation": "https://github.com/quotaql/quotaql/tree/main/docs",
        "Source": "https://github.com/quotaql/quotaql",
        "Issues": "https://github.com/quotaql/quotaql/issues",
    }
    # the demo's configuration ships with the package (quotaql demo reads it)
    assert "quotaql/demo/quotaql.toml" in names
    assert "quotaql/py.typed" in names


def test_the_sdist_holds_the_docs_the_readme_and_the_license(dist: Path) -> None:
    (sdist,) = dist.glob("quotaql-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.partition("/")[2] for name in archive.getnames()}
    docs = {str(path.relative_to(ROOT)) for path in (ROOT / "docs").rglob("*") if path.is_file()}
    assert docs, "no docs found in the checkout"
    assert docs <= names, sorted(docs - names)
    assert {"README.md", "LICENSE", "pyproject.toml", "Makefile"} <= names
    assert "scripts/ensure-system-deps.sh" in names  # `make test` runs it
    assert not any(name.startswith((".venv", ".git/")) for name in names)


def test_make_demo_installs_the_demo_extra_only_in_its_own_environment(tmp_path: Path) -> None:
    # What `make demo` would run from a fresh clone (no environment yet): -n prints it.
    shown = subprocess.run(
        [
            "make",
            "-n",
            "--no-print-directory",
            "-C",
            str(ROOT),
            "demo",
            f"DEMO_VENV={tmp_path / 'venv'}",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    installs = [line for line in shown.splitlines() if " install " in line]

    assert installs, shown
    assert all("-e '.[demo]'" in line for line in installs), installs
    assert "--group" not in shown  # not the development group (Django, Flask, ...)
    assert ".venv/" not in shown  # nor `make test`'s environment
    assert shown.rstrip().endswith(f"{tmp_path / 'venv'}/bin/quotaql demo")
