"""The ``time`` key of ``[limits]`` and of a tier: a time quota's table, or ``false``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, TypeVar

from quotaql.config import checks
from quotaql.config.document import Table, describe_value
from quotaql.config.values import time_quota

if TYPE_CHECKING:
    from quotaql.config.document import Document
    from quotaql.config.locator import KeyPath
    from quotaql.policy.quota import Quota

__all__ = ["TIME_KEYS", "tier_time", "time_table"]

T = TypeVar("T")

TIME_KEYS: Final = ("capacity_ms", "refill_ms_per_second")


def time_table(doc: Document, path: KeyPath, value: object, *, off: T) -> Quota | T:
    """A ``time`` key: ``{ capacity_ms = ..., refill_ms_per_second = ... }`` (the time
    quota, :func:`~quotaql.config.values.time_quota`), or ``false`` (``off``: none)."""
    if value is False:
        return off
    if not isinstance(value, dict):
        raise doc.error(
            path,
            "expected a table { capacity_ms = ..., refill_ms_per_second = ... }, or false for"
            f" none, got {describe_value(value)}",
        )
    table = Table(doc, path, value)
    table.check_keys(TIME_KEYS)
    missing = [key for key in TIME_KEYS if key not in value]
    if missing:
        raise doc.error(path, f"a time quota needs capacity_ms and refill_ms_per_second;"
                              f" missing: {', '.join(missing)}")  # fmt: skip
    capacity = checks.positive_number(doc, (*path, "capacity_ms"), value["capacity_ms"])
    refill = checks.positive_number(
        doc, (*path, "refill_ms_per_second"), value["refill_ms_per_second"]
    )
    with table.blame():
        return time_quota(capacity, refill)


def tier_time(doc: Document, path: KeyPath, value: object) -> Quota | bool:
    """A tier's ``time``: its own time quota, or False (none for this tier)."""
    return time_table(doc, path, value, off=False)
