"""Fixtures of the Ariadne tests: quotaql.toml files, and the shop's resolver log."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.ariadne import shop
from tests.shop_http import write_shop_config

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path


@pytest.fixture(autouse=True)
def _clear_resolver_calls() -> Iterator[None]:
    shop.resolver_calls.clear()
    yield
    shop.resolver_calls.clear()


@pytest.fixture
def write_config(tmp_path: Path) -> Callable[..., Path]:
    """Write the shop's quotaql.toml (see ``write_shop_config``) and return its path."""

    def write(extra: str = "", *, limits: str = "") -> Path:
        return write_shop_config(tmp_path / "quotaql.toml", extra, limits=limits)

    return write


@pytest.fixture
def config_path(write_config: Callable[..., Path]) -> Path:
    return write_config()
