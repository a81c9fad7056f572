"""Fixtures of the extension's tests: config files and schemas with a CostLimiter."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.support import strawberry_shop as shop

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

BASE_TOML = """
[limits]
default_tier = "free"

[tiers.free]
capacity = 100
refill_per_second = 0.001

[tiers.pro]
capacity = 1000
refill_per_second = 0.001
[tiers.pro.operations]
ExportOrders = { capacity = 20, refill_per_second = 0.001 }

[tenants.acme]
tier = "pro"

# Known keys on the free tier (an unknown key counts as its client's address).
[tenants.t]
tier = "free"
[tenants.tenant-a]
tier = "free"
[tenants.one]
tier = "free"
[tenants.a]
tier = "free"
[tenants.b]
tier = "free"
[tenants.c]
tier = "free"
"""


@pytest.fixture(autouse=True)
def _clear_resolver_calls() -> Iterator[None]:
    shop.resolver_calls.clear()
    yield
    shop.resolver_calls.clear()


@pytest.fixture
def write_config(tmp_path: Path) -> Callable[[str], Path]:
    """Write a quotaql.toml (BASE_TOML plus ``extra``) and return its path."""

    def write(extra: str = "", *, base: str = BASE_TOML) -> Path:
        path = tmp_path / "quotaql.toml"
        path.write_text(base + extra, encoding="utf-8")
        return path

    return write
