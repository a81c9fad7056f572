"""Fixtures of the Ariadne tests: quotaql.toml files, and the shop's resolver log."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.support import ariadne_shop as shop
from tests.support.shop_http import config_path, write_config  # noqa: F401 (fixtures, by name)

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.fixture(autouse=True)
def _clear_resolver_calls() -> Iterator[None]:
    shop.resolver_calls.clear()
    yield
    shop.resolver_calls.clear()
