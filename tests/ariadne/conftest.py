"""Fixtures of the Ariadne tests: quotaql.toml files, and the shop's resolver log."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.ariadne import shop

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

# Known keys are listed under [tenants] (an unknown key counts as its client's address).
TOML = """
[limits]
reload_interval = 0.1
[tiers.free]
capacity = 100
refill_per_second = 0.001
[tiers.pro]
capacity = 1000
refill_per_second = 0.001
[tenants.acme]
tier = "pro"
[tenants.tenant-a]
tier = "free"
[tenants.tenant-b]
tier = "free"
[tenants.crowd]
tier = "free"
"""


@pytest.fixture(autouse=True)
def _clear_resolver_calls() -> Iterator[None]:
    shop.resolver_calls.clear()
    yield
    shop.resolver_calls.clear()


@pytest.fixture
def write_config(tmp_path: Path) -> Callable[..., Path]:
    """Write a quotaql.toml (``TOML`` with ``limits`` lines in its ``[limits]``, and
    ``extra`` tables) and return its path."""

    def write(extra: str = "", *, limits: str = "") -> Path:
        path = tmp_path / "quotaql.toml"
        text = TOML.replace("[limits]\n", "[limits]\n" + limits) + extra
        path.write_text(text, encoding="utf-8")
        return path

    return write


@pytest.fixture
def config_path(write_config: Callable[..., Path]) -> Path:
    return write_config()
