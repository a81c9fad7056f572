"""The limiters' keyword options as types: written once for :class:`~quotaql.limiter.Limiter`
and :class:`~quotaql.limiter.AsyncLimiter` (``**options: Unpack[...]``), checked by
``mypy --strict`` and editors; what each means is said on :class:`~quotaql.limiter.Limiter`."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from collections.abc import Sequence

    from quotaql.limiter.breaker import CircuitBreaker
    from quotaql.limiter.recorder import Recorder
    from quotaql.policy.modes import BackendErrorMode
    from quotaql.policy.quota import Decision
    from quotaql.storage.memory import MemoryStorage

__all__ = ["AcquireOptions", "LimiterOptions", "RefundOptions"]


class LimiterOptions(TypedDict, total=False):
    """A limiter's keyword-only parameters (see :class:`~quotaql.limiter.Limiter`)."""

    on_backend_error: BackendErrorMode
    breaker: CircuitBreaker | None
    fallback: MemoryStorage | None
    recorder: Recorder | None
    local_share: float
    open_cap: float | None
    defer_refunds: bool
    refund_max_age: float
    refund_queue_size: int


class AcquireOptions(TypedDict, total=False):
    """``acquire``'s keywords: ``now`` (ms, tests; default the storage's clock) and
    ``costs`` (what each quota is debited instead of the cost, one per quota)."""

    now: int | None
    costs: Sequence[float] | None


class RefundOptions(TypedDict, total=False):
    """``refund``'s keywords: ``now``, ``amounts`` (what each quota gets back instead of the
    amount) and ``decision`` (the decision whose debit this gives back)."""

    now: int | None
    amounts: Sequence[float] | None
    decision: Decision | None
