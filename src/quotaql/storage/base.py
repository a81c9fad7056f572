"""What a storage provides: the limiter works with any object of this shape."""

from __future__ import annotations

import base64
import hashlib
import math
from typing import TYPE_CHECKING, Protocol

from quotaql.policy.quota import Quota

if TYPE_CHECKING:
    from collections.abc import Sequence

    from quotaql.policy.quota import Decision

__all__ = ["AsyncStorage", "Storage", "check_arguments", "tenant_digest"]


def tenant_digest(tenant: str) -> str:
    """128 bits of ``tenant``'s SHA-256, in 22 URL-safe characters: what the storages keep
    of a tenant key that is long or outside a safe alphabet (no practical collision)."""
    digest = hashlib.sha256(tenant.encode("utf-8", "surrogatepass")).digest()[:16]
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def check_arguments(
    amount: float, quotas: Sequence[Quota], amounts: Sequence[float] | None = None
) -> None:
    """Refuse a cost or refund that is not a finite number >= 0, or quotas that are not Quotas.

    ``amounts``, when given, is what each quota is asked for instead (one per quota).

    Raises:
        TypeError: ``amount`` is not a number (``bool`` is not), or a quota is not a Quota.
        ValueError: ``amount`` is negative, NaN or infinite, or ``amounts`` does not give
            one valid amount per quota.
    """
    kind = type(amount)
    if (
        (kind is float or kind is int)
        and 0 <= amount < math.inf
        and len(quotas) == 1
        and type(quotas[0]) is Quota
        and amounts is None
    ):
        return  # the common case, on every request: one quota, a plain number
    _check_amount(amount)
    for quota in quotas:
        if type(quota) is not Quota:
            raise TypeError(f"quotas must be Quota objects, got {type(quota).__name__}")
    if amounts is not None:
        if len(amounts) != len(quotas):
            raise ValueError(
                f"costs must give one amount per quota: {len(amounts)} for {len(quotas)}"
            )
        for each in amounts:
            _check_amount(each)


def _check_amount(amount: float) -> None:
    if type(amount) not in (float, int) and (
        isinstance(amount, bool) or not isinstance(amount, int | float)
    ):
        raise TypeError(f"cost must be a number, got {type(amount).__name__}")
    if not 0 <= amount < math.inf:  # NaN fails too
        raise ValueError(f"cost must be a finite number >= 0, got {amount!r}")


class Storage(Protocol):
    """Quota state behind a synchronous API.

    ``key`` is the tenant; ``None`` is the shared scope of quotas with ``shared=True``.
    ``now`` (integer milliseconds) overrides the storage's clock, for tests. ``costs``
    (``amounts`` for a refund), when given, is what each quota is asked for, one per quota,
    instead of the same amount for all. Failures of the backend raise
    :class:`quotaql.errors.StorageError`.
    """

    name: str

    def acquire(
        self,
        key: str | None,
        cost: float,
        quotas: Sequence[Quota],
        now: int | None = None,
        costs: Sequence[float] | None = None,
    ) -> Decision:
        """Debit ``cost`` from every quota if all allow it; else debit nothing."""
        ...

    def refund(
        self,
        key: str | None,
        amount: float,
        quotas: Sequence[Quota],
        now: int | None = None,
        amounts: Sequence[float] | None = None,
        at: int | None = None,
        turn: int | None = None,
    ) -> None:
        """Give ``amount`` back to every quota (never above full), for the debit of a
        decision made at ``at`` (its ``Decision.at``, in the storage's clock; None: now):
        a window gives back only to the window that debit was counted in. ``turn`` is the
        turn that debit reserved (ms, ``at`` plus ``Decision.delay``; None: it did not
        wait): one waiter of that turn leaves the line of each quota with ``max_queued``."""
        ...

    def peek(self, key: str | None, quotas: Sequence[Quota], now: int | None = None) -> Decision:
        """Each quota's state, without debiting anything."""
        ...


class AsyncStorage(Protocol):
    """:class:`Storage` for asyncio."""

    name: str

    async def acquire(
        self,
        key: str | None,
        cost: float,
        quotas: Sequence[Quota],
        now: int | None = None,
        costs: Sequence[float] | None = None,
    ) -> Decision:
        """Debit ``cost`` from every quota if all allow it; else debit nothing."""
        ...

    async def refund(
        self,
        key: str | None,
        amount: float,
        quotas: Sequence[Quota],
        now: int | None = None,
        amounts: Sequence[float] | None = None,
        at: int | None = None,
        turn: int | None = None,
    ) -> None:
        """Give ``amount`` back to every quota (never above full), for the debit of a
        decision made at ``at`` (its ``Decision.at``, in the storage's clock; None: now):
        a window gives back only to the window that debit was counted in. ``turn`` is the
        turn that debit reserved (ms, ``at`` plus ``Decision.delay``; None: it did not
        wait): one waiter of that turn leaves the line of each quota with ``max_queued``."""
        ...

    async def peek(
        self, key: str | None, quotas: Sequence[Quota], now: int | None = None
    ) -> Decision:
        """Each quota's state, without debiting anything."""
        ...
