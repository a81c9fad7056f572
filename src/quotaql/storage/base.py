"""What a storage provides: the limiter works with any object of this shape."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Sequence

    from quotaql.policy.quota import Decision, Quota

__all__ = ["AsyncStorage", "Storage"]


class Storage(Protocol):
    """Quota state behind a synchronous API.

    ``key`` is the tenant; ``None`` is the shared scope of quotas with ``shared=True``.
    ``now`` (integer milliseconds) overrides the storage's clock, for tests. Failures of
    the backend raise :class:`quotaql.errors.StorageError`.
    """

    name: str

    def acquire(
        self, key: str | None, cost: float, quotas: Sequence[Quota], now: int | None = None
    ) -> Decision:
        """Debit ``cost`` from every quota if all allow it; else debit nothing."""
        ...

    def refund(
        self, key: str | None, amount: float, quotas: Sequence[Quota], now: int | None = None
    ) -> None:
        """Give ``amount`` back to every quota (never above full)."""
        ...

    def peek(self, key: str | None, quotas: Sequence[Quota], now: int | None = None) -> Decision:
        """Each quota's state, without debiting anything."""
        ...


class AsyncStorage(Protocol):
    """:class:`Storage` for asyncio."""

    name: str

    async def acquire(
        self, key: str | None, cost: float, quotas: Sequence[Quota], now: int | None = None
    ) -> Decision:
        """Debit ``cost`` from every quota if all allow it; else debit nothing."""
        ...

    async def refund(
        self, key: str | None, amount: float, quotas: Sequence[Quota], now: int | None = None
    ) -> None:
        """Give ``amount`` back to every quota (never above full)."""
        ...

    async def peek(
        self, key: str | None, quotas: Sequence[Quota], now: int | None = None
    ) -> Decision:
        """Each quota's state, without debiting anything."""
        ...
