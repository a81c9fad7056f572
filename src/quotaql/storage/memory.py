"""The embedded default storage: a dict in process memory around the policy functions."""

from __future__ import annotations

import itertools
import threading
import time
from typing import TYPE_CHECKING, Any

from quotaql.errors import ConfigError
from quotaql.policy.algorithms import ALGORITHMS, commit
from quotaql.policy.quota import Decision, Quota, Source, combine, decide_one
from quotaql.storage.base import check_arguments

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = ["MemoryStorage"]

# Every 256 writes, look at this many of the least recently used keys for expiry.
_SWEEP_MASK = 255
_SWEEP_BATCH = 64


class MemoryStorage:
    """Quota state in a dict, for one process: the embedded default.

    Thread-safe (one lock, held only while deciding, never across an ``await``, so it is
    also safe to call from asyncio code). Bounded: state that no longer matters (a full
    bucket, an empty window) expires and is swept, and beyond ``max_keys`` the least
    recently used key is evicted, so a stream of random tenant keys cannot exhaust memory.

    Example:
        >>> from quotaql import Quota
        >>> storage = MemoryStorage()
        >>> quota = Quota("tenant", capacity=100, refill_per_second=1)
        >>> storage.acquire("acme", 30, [quota]).remaining
        70.0

    Args:
        clock: seconds from a monotonic clock (``time.monotonic`` by default); tests inject
            their own.
        max_keys: most (tenant, quota) states kept; the least recently used goes first.
        source: the ``Decision.source`` it reports (the limiter's local fallback uses
            ``"fallback"``).
    """

    name = "memory"

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = 1_000_000,
        source: Source = "memory",
    ) -> None:
        if isinstance(max_keys, bool) or not isinstance(max_keys, int) or max_keys < 1:
            raise ConfigError(f"max_keys must be a positive integer, got {max_keys!r}")
        self._clock = clock
        self._max_keys = max_keys
        self._source: Source = source
        self._lock = threading.Lock()
        # key -> (expires at ms, state); dict order is least recently used first.
        self._states: dict[str, tuple[int, Any]] = {}
        self._writes = 0

    def now(self) -> int:
        """The storage clock in integer milliseconds."""
        return int(self._clock() * 1000)

    def __len__(self) -> int:
        return len(self._states)

    # -- the storage protocol ------------------------------------------------------------

    def acquire(
        self,
        key: str | None,
        cost: float,
        quotas: Sequence[Quota],
        now: int | None = None,
        costs: Sequence[float] | None = None,
    ) -> Decision:
        """Debit ``cost`` (or each quota's ``costs``) from every quota of ``key`` if all
        allow it; else debit nothing."""
        check_arguments(cost, quotas, costs)
        return self.decide(key, cost, quotas, now, costs)

    def decide(
        self,
        key: str | None,
        cost: float,
        quotas: Sequence[Quota],
        now: int | None = None,
        costs: Sequence[float] | None = None,
    ) -> Decision:
        """:meth:`acquire` for arguments already checked (the limiter checks them first)."""
        if now is None:
            now = int(self._clock() * 1000)
        if len(quotas) == 1 and costs is None:
            return self._acquire_one(key, cost, quotas[0], now)
        return self._acquire_many(key, cost, quotas, now, costs)

    def _acquire_many(
        self,
        key: str | None,
        cost: float,
        quotas: Sequence[Quota],
        now: int,
        costs: Sequence[float] | None,
    ) -> Decision:
        amounts = costs if costs is not None else [cost] * len(quotas)
        with self._lock:
            keys = [_key(key, quota) for quota in quotas]
            checks = [
                ALGORITHMS[quota.algorithm][0](self._get(k, now), now, amount, *quota.params)
                for k, quota, amount in zip(keys, quotas, amounts, strict=True)
            ]
            if all(check.allowed for check in checks):
                for k, quota, check in zip(keys, quotas, checks, strict=True):
                    self._put(k, now, check.ttl_ms, commit(quota.algorithm, check.state))
        return combine(quotas, checks, cost, self._source, costs)

    def _acquire_one(self, key: str | None, cost: float, quota: Quota, now: int) -> Decision:
        """:meth:`acquire` for one quota: the common case, with the state table inlined."""
        k = f"{quota.state_name}\1" if key is None else f"{quota.state_name}\0{key}"
        algorithm = quota.algorithm
        states = self._states
        with self._lock:
            entry = states.pop(k, None)  # re-inserted below: most recently used
            if entry is not None and entry[0] <= now:
                entry = None  # expired
            allowed, exceeds, new, remaining, retry_ms, reset_ms, ttl = ALGORITHMS[algorithm][0](
                None if entry is None else entry[1], now, cost, *quota.params
            )
            if allowed and new is not None:
                if ttl > 0:  # else the new state is the empty one: nothing to keep
                    if algorithm == "sliding_log":  # the only state commit() changes
                        new = commit(algorithm, new)
                    states[k] = (now + ttl, new)
                    if len(states) > self._max_keys:
                        del states[next(iter(states))]
                    self._writes += 1
                    if not self._writes & _SWEEP_MASK:
                        self._sweep(now)
            elif entry is not None:  # unchanged
                states[k] = entry
        return decide_one(
            quota, allowed, exceeds, remaining, retry_ms, reset_ms, cost, self._source
        )

    def refund(
        self,
        key: str | None,
        amount: float,
        quotas: Sequence[Quota],
        now: int | None = None,
        amounts: Sequence[float] | None = None,
    ) -> None:
        """Give ``amount`` (or each quota's ``amounts``) back to every quota of ``key``
        (never above full)."""
        check_arguments(amount, quotas, amounts)
        each = amounts if amounts is not None else [amount] * len(quotas)
        now = self.now() if now is None else now
        with self._lock:
            for quota, given in zip(quotas, each, strict=True):
                if given == 0:
                    continue
                k = _key(key, quota)
                refund = ALGORITHMS[quota.algorithm][1]
                state, ttl = refund(self._get(k, now), now, given, *quota.params)
                if state is None:
                    self._states.pop(k, None)
                else:
                    self._put(k, now, ttl, state)

    def peek(self, key: str | None, quotas: Sequence[Quota], now: int | None = None) -> Decision:
        """Each quota's state for ``key``, without debiting anything."""
        check_arguments(0, quotas)
        now = self.now() if now is None else now
        with self._lock:
            checks = [
                ALGORITHMS[quota.algorithm][0](
                    self._get(_key(key, quota), now), now, 0.0, *quota.params
                )
                for quota in quotas
            ]
        return combine(quotas, checks, 0.0, self._source)

    def clear(self) -> None:
        """Forget every state."""
        with self._lock:
            self._states.clear()

    # -- state table ---------------------------------------------------------------------

    def _get(self, key: str, now: int) -> Any:
        entry = self._states.get(key)
        if entry is None:
            return None
        if entry[0] <= now:
            del self._states[key]
            return None
        return entry[1]

    def _put(self, key: str, now: int, ttl_ms: int, state: object) -> None:
        if state is None:  # nothing to write (a sliding log asked for cost 0)
            return
        states = self._states
        states.pop(key, None)  # re-inserted at the end: most recently used
        if ttl_ms <= 0:  # equal to the empty state
            return
        states[key] = (now + ttl_ms, state)
        if len(states) > self._max_keys:
            del states[next(iter(states))]
        self._writes += 1
        if not self._writes & _SWEEP_MASK:
            self._sweep(now)

    def _sweep(self, now: int) -> None:
        """Drop expired states among the least recently used (bounded work per call)."""
        states = self._states
        oldest = itertools.islice(states.items(), _SWEEP_BATCH)
        expired = [key for key, (expires, _) in oldest if expires <= now]
        for key in expired:
            del states[key]


def _key(tenant: str | None, quota: Quota) -> str:
    # Quota names cannot hold "\0" or "\1", so the first of them ends the name: no two
    # (name, tenant) pairs share a key, and one string costs less memory than a tuple.
    # A shared quota (tenant None) has one key for everybody.
    return f"{quota.state_name}\1" if tenant is None else f"{quota.state_name}\0{tenant}"
