"""A Strawberry schema under ``CostLimiter.from_config(path)``, for the rate-limiting matrix.

``{ items(first: N) { id } }`` costs exactly ``N`` points (a list of ``Item`` objects sized
by ``first``) and returns ``N`` items, so its actual cost is its estimate and nothing is
refunded: budgets move by exact amounts (``{ few(first: N) { id } }`` costs ``N`` too but
returns at most three items: the rest comes back after execution). ``{ subject }`` (free) answers whose budget paid for
the operation, ``key:acme`` or ``ip:127.0.0.2``, from ``quotaql.plugin.current_operation()``.

The channels server imports its schema in daphne's child process: ``CHANNELS_LIMITED`` is
built at import from the config file named by ``QUOTAQL_LIMITED_CONFIG`` (set it in this
process while the server starts: the child inherits the environment); without the variable
(pytest's doctest collection imports every module) it is None.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import strawberry

from quotaql.plugin import CostLimiter, current_operation

if TYPE_CHECKING:
    from pathlib import Path

__all__ = [
    "CHANNELS_LIMITED",
    "CHANNELS_LIMITED_PATH",
    "CONFIG_VARIABLE",
    "FEW",
    "limited_schema",
]

CONFIG_VARIABLE = "QUOTAQL_LIMITED_CONFIG"
FEW = 3


@strawberry.type
class Item:
    id: int


@strawberry.type
class Query:
    @strawberry.field
    def items(self, first: int = 10) -> list[Item]:
        return [Item(id=index) for index in range(first)]

    @strawberry.field
    def few(self, first: int = 10) -> list[Item]:
        """Priced at ``first`` items, returns at most three: the rest is refunded."""
        return [Item(id=index) for index in range(min(first, FEW))]

    @strawberry.field
    def subject(self) -> str | None:
        """The key of the budget this operation is debited from."""
        op = current_operation()
        return None if op is None else op.tenant


def limited_schema(config_path: str | os.PathLike[str] | Path) -> strawberry.Schema:
    """The schema, limited by the ``quotaql.toml`` at ``config_path`` (its own storage)."""
    return strawberry.Schema(query=Query, extensions=[CostLimiter.from_config(config_path)])


_config = os.environ.get(CONFIG_VARIABLE)
CHANNELS_LIMITED = limited_schema(_config) if _config else None
CHANNELS_LIMITED_PATH = f"{__name__}:CHANNELS_LIMITED"
