"""What the HTTP tests of every adapter share: the shop's budgets, two priced operations, a client."""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx
import pytest

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

EXPENSIVE = "{ products(first: 10) { name reviews(first: 5) { stars } } }"  # 70, actual 16
EXPORT = "mutation { exportOrders }"  # 10 (mutation weight), actual 10: no refund

# Known keys are listed under [tenants] (an unknown key counts as its client's address).
SHOP_TOML = """
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


def write_shop_config(path: Path, extra: str = "", *, limits: str = "") -> Path:
    """Write ``SHOP_TOML`` to ``path``, ``limits`` lines added to its ``[limits]`` and
    ``extra`` tables after it."""
    text = SHOP_TOML.replace("[limits]\n", "[limits]\n" + limits) + extra
    path.write_text(text, encoding="utf-8")
    return path


def post(url: str, query: str, key: str = "tenant-a", **headers: str) -> httpx.Response:
    """POST ``query`` to ``url``'s /graphql with ``key`` as the X-API-Key."""
    return httpx.post(
        f"{url}/graphql", json={"query": query}, headers={"X-API-Key": key, **headers}, timeout=10
    )


@pytest.fixture
def write_config(tmp_path: Path) -> Callable[..., Path]:
    """Write the shop's quotaql.toml (see ``write_shop_config``) and return its path."""

    def write(extra: str = "", *, limits: str = "") -> Path:
        return write_shop_config(tmp_path / "quotaql.toml", extra, limits=limits)

    return write


@pytest.fixture
def config_path(write_config: Callable[..., Path]) -> Path:
    return write_config()
