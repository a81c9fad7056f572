"""The limiters: several quotas per key, shared quotas, and fail modes (with the circuit
breaker of :mod:`quotaql.limiter.breaker`).

:class:`Limiter` and :class:`AsyncLimiter` are thin entry points around the flows of
:mod:`quotaql.limiter.flows`, which they run with plain calls (sync) or awaits (async);
refunds the storage could not take wait in a queue that a thread (sync) or a task (async)
applies.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Unpack

from quotaql._flow import is_pending
from quotaql.limiter.flows import (
    QUEUED,
    Core,
    Operations,
    refund_of,
)
from quotaql.policy.quota import Decision, Quota
from quotaql.storage.memory import MemoryStorage

if TYPE_CHECKING:
    from collections.abc import Sequence

    from quotaql.limiter.breaker import CircuitBreaker
    from quotaql.limiter.options import AcquireOptions as Acquire
    from quotaql.limiter.options import LimiterOptions
    from quotaql.limiter.options import RefundOptions as Refund
    from quotaql.limiter.refunds import RefundQueue
    from quotaql.storage.base import AsyncStorage, Storage

    Quotas = Sequence[Quota]

__all__ = ["AsyncLimiter", "Limiter"]

# Refunds the storage could not take are tried again after this many seconds.
_RETRY_INTERVAL = 0.1
# An idle refund thread ends after this many seconds (the next refund starts another).
_IDLE_THREAD = 5.0
# How long a peek waits for the refunds queued before it (then it reads what is there).
_PEEK_FLUSH = 1.0
# What a process does at exit with refunds still waiting: a last try, this long at most.
_EXIT_FLUSH = 0.5
_STARTING = threading.Lock()  # starting a limiter's refund thread
_LIMITERS: weakref.WeakSet[Limiter] = weakref.WeakSet()  # those with a refund thread


class _LimiterBase:
    """The constructor both limiters share."""

    def __init__(
        self,
        storage: Storage | AsyncStorage | MemoryStorage | None = None,
        **options: Unpack[LimiterOptions],
    ) -> None:
        self._core = Core(storage if storage is not None else MemoryStorage(), **options)
        self._ops = Operations(self._core)
        self._pending = threading.Event()  # refunds were queued (the sync refund thread)
        self._thread: threading.Thread | None = None
        self._task: asyncio.Task[None] | None = None  # the async refund task

    @property
    def refund_queue(self) -> RefundQueue | None:
        """The refunds waiting to be applied (None: refunds are applied at once)."""
        return self._core.refunds

    @property
    def core(self) -> Core:
        """What the limiter's operations share (its storage, breaker, fail mode, recorder):
        the concurrency limiter goes through the same."""
        return self._core

    @property
    def breaker(self) -> CircuitBreaker:
        """The circuit breaker in front of the storage."""
        return self._core.breaker


class Limiter(_LimiterBase):
    """Debits a key's quotas by the cost of each request; answers even when Redis is down.

    Example:
        >>> limiter = Limiter(MemoryStorage())
        >>> tenant = Quota("tenant", capacity=100, refill_per_second=10)
        >>> limiter.acquire("acme", cost=60, quotas=[tenant]).allowed
        True
        >>> decision = limiter.acquire("acme", cost=60, quotas=[tenant])
        >>> decision.allowed, decision.limited_by, decision.retry_after
        (False, 'tenant', 2.0)

    Args:
        storage: :class:`~quotaql.storage.memory.MemoryStorage` (default) or
            :class:`~quotaql.storage.redis.RedisStorage`.
        on_backend_error: when the storage fails: ``"open"`` allows (no limit while it is
            down, unless ``open_cap``), ``"closed"`` refuses (``reason="backend_unavailable"``),
            ``"local"`` decides with an in-process :class:`MemoryStorage` until the storage
            is back, each state starting from what the storage last reported of it.
        breaker: the circuit breaker in front of the storage.
        fallback: the storage ``"local"`` (and ``open_cap``) uses.
        recorder: receives decisions, backend errors and breaker changes (metrics).
        local_share: with ``"local"``, the share of a quota's capacity (0 to 1) that a
            state the storage never reported to this limiter starts an outage with.
        open_cap: with ``"open"``, a share of each quota's capacity (above 0, at most 1):
            while the storage is down, each state starts at ``capacity * open_cap`` (fresh
            each outage) and refills at the quota's rate; beyond it requests are refused
            (``source="fallback"``, ``reason="rate_limited"``). None: no limit.
    """

    @property
    def storage(self) -> Storage:
        """The storage decisions are made in."""
        storage: Storage = self._core.storage
        return storage

    def acquire(
        self, key: str, cost: float, quotas: Quotas, **options: Unpack[Acquire]
    ) -> Decision:
        """Debit ``cost`` from every quota of ``key``, all of them or none.

        Args:
            key: the tenant.
            cost: what the request costs (>= 0).
            quotas: the quotas that apply; shared ones are one budget for all keys.
            now: the time in ms (tests); by default the storage's clock.
            costs: what each quota is debited instead of ``cost``, one per quota (a root
                field's quota pays that field's cost).
        """
        decision: Decision = self._ops.acquire(key, cost, quotas, options)
        return decision

    def refund(self, key: str, amount: float, quotas: Quotas, **options: Unpack[Refund]) -> None:
        """Give back ``amount`` (estimated minus actual cost) to every quota of ``key``
        (or each quota its ``amounts``).

        ``decision`` is the decision whose debit this gives back: a refund goes where that
        debit was made (the storage, or the local fallback during an outage; nothing for a
        fail-open or fail-closed decision, which debited nothing), and a window gives back
        only to the window it was counted in (``decision.at``). Without it, the refund is of
        a debit made in the storage now. On a storage that can fail (Redis), the refund is
        queued and applied by a thread of the limiter's (see :mod:`quotaql.limiter.refunds`).
        """
        debit, decision = refund_of(key, amount, quotas, options)
        if self._ops.refund(debit, decision) is QUEUED:
            self._wake()

    def charge(self, key: str, amount: float, quotas: Quotas, **options: Unpack[Refund]) -> None:
        """Debit ``amount`` more from every quota of ``key`` (or each quota its
        ``amounts``) whether it fits or not: what an operation ran above its debit (its
        overage). A quota may go below empty; the key's next requests wait until it has
        refilled past the debt (what that means for each algorithm: docs/limiter.md).

        ``decision`` is the decision whose debit ran over: nothing is charged for a refusal,
        or for a fail-open or fail-closed decision (they debited nothing). Made at once (not
        queued like a refund), through the breaker: while the storage is down, the fail mode
        decides (``local``: charged in the fallback; ``open``, ``closed``: not charged).
        """
        self._ops.charge(*refund_of(key, amount, quotas, options))

    def peek(self, key: str, quotas: Sequence[Quota], *, now: int | None = None) -> Decision:
        """The state of ``key``'s quotas, without debiting anything (after the refunds
        queued before it: a peek reads what this process refunded)."""
        queue = self._core.refunds
        if queue is not None and queue.pending:
            self._flush(_PEEK_FLUSH, until_open=True)
        decision: Decision = self._ops.peek(key, quotas, now)
        return decision

    def flush(self, timeout: float = 5.0) -> int:
        """Apply the refunds waiting now, in this thread (at shutdown, in tests); give up on
        the ones the storage cannot take within ``timeout`` seconds (they stay queued).

        Returns:
            How many refunds are still waiting.
        """
        return self._flush(timeout)

    def _flush(self, timeout: float, *, until_open: bool = False) -> int:
        """:meth:`flush`; ``until_open``: give up as soon as the breaker keeps the storage
        away (a peek: the refunds cannot be sent then, and the peek reads the fail mode, not
        the storage, so waiting for them would only hold its caller)."""
        queue = self._core.refunds
        if queue is None:
            return 0
        breaker = self._core.breaker
        deadline = time.monotonic() + timeout
        while queue.pending and time.monotonic() < deadline:
            if until_open and breaker.retry_after() > 0:
                break
            if len(queue):
                if not self._apply(queue, deadline) and time.monotonic() < deadline:
                    time.sleep(_RETRY_INTERVAL)
            else:  # the refund thread is applying some
                queue.wait_done(max(0.0, deadline - time.monotonic()))
        return len(queue)

    def _apply(self, queue: RefundQueue, deadline: float | None = None) -> bool:
        """Apply what is waiting; False if the storage could not take all of it. Past the
        ``deadline`` (monotonic seconds: a flush's), the rest is left queued, not tried: one
        round trip each, a backlog would hold the flushing thread (a peek, the exit) far
        longer than its timeout."""
        with queue.taking() as waiting:
            if deadline is None:
                outcomes: list[Any] = [self._ops.apply(refund) for refund in waiting]
            else:
                outcomes = []
                for refund in waiting:
                    late = time.monotonic() >= deadline
                    outcomes.append("retry" if late else self._ops.apply(refund))
            return self._core.settle_refunds(queue, waiting, outcomes)

    def _wake(self) -> None:
        """Make sure the refund thread runs (started on first use, again in a forked child)."""
        self._pending.set()
        thread = self._thread
        if thread is None or not thread.is_alive():
            with _STARTING:
                if self._thread is None or not self._thread.is_alive():
                    self._thread = threading.Thread(
                        target=_refund_thread,
                        args=(weakref.ref(self), self._pending),
                        name="quotaql-refunds",
                        daemon=True,
                    )
                    self._thread.start()
                    _LIMITERS.add(self)


class AsyncLimiter(_LimiterBase):
    """:class:`Limiter` for asyncio, over :class:`~quotaql.storage.redis.AsyncRedisStorage`.

    A :class:`MemoryStorage` works too (its calls do not block).
    """

    @property
    def storage(self) -> AsyncStorage | MemoryStorage:
        """The storage decisions are made in."""
        storage: AsyncStorage | MemoryStorage = self._core.storage
        return storage

    async def acquire(
        self, key: str, cost: float, quotas: Quotas, **options: Unpack[Acquire]
    ) -> Decision:
        """Debit ``cost`` (or each quota's ``costs``) from every quota of ``key``, all of
        them or none."""
        decision = self._ops.acquire(key, cost, quotas, options)
        return decision if decision.__class__ is Decision else await decision

    async def refund(
        self, key: str, amount: float, quotas: Quotas, **options: Unpack[Refund]
    ) -> None:
        """:meth:`Limiter.refund`: queued, and applied by a task of the event loop with the
        storage's calls in flight."""
        done = self._ops.refund(*refund_of(key, amount, quotas, options))
        if done is QUEUED:
            self._schedule()
        elif is_pending(done):
            await done

    async def charge(
        self, key: str, amount: float, quotas: Quotas, **options: Unpack[Refund]
    ) -> None:
        """:meth:`Limiter.charge`: made at once, awaited."""
        done = self._ops.charge(*refund_of(key, amount, quotas, options))
        if is_pending(done):
            await done

    async def peek(self, key: str, quotas: Sequence[Quota], *, now: int | None = None) -> Decision:
        """The state of ``key``'s quotas, without debiting anything (after the refunds
        queued before it: a peek reads what this process refunded)."""
        queue = self._core.refunds
        if queue is not None and queue.pending:
            await self._flush(_PEEK_FLUSH, until_open=True)
        decision = self._ops.peek(key, quotas, now)
        return decision if decision.__class__ is Decision else await decision

    async def flush(self, timeout: float = 5.0) -> int:
        """Apply the refunds waiting now (at shutdown, in tests); give up on the ones the
        storage cannot take within ``timeout`` seconds (they stay queued).

        Returns:
            How many refunds are still waiting.
        """
        return await self._flush(timeout)

    async def _flush(self, timeout: float, *, until_open: bool = False) -> int:
        """:meth:`flush` (``until_open``: as :meth:`Limiter._flush`)."""
        queue = self._core.refunds
        if queue is None:
            return 0
        breaker = self._core.breaker
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while queue.pending and loop.time() < deadline:
            if until_open and breaker.retry_after() > 0:
                break
            task = self._task
            if task is not None and not task.done() and task.get_loop() is loop:
                # The loop's refund task is applying some: wait for it (a peek looks at the
                # breaker again after each of the task's tries).
                left = max(0.0, deadline - loop.time())
                await asyncio.wait(
                    {task}, timeout=min(left, _RETRY_INTERVAL) if until_open else left
                )
            elif len(queue):
                if not await self._apply(queue):
                    await asyncio.sleep(_RETRY_INTERVAL)
            else:  # taken by a task of another loop: nothing to wait on here
                break
        return len(queue)

    async def _apply(self, queue: RefundQueue) -> bool:
        """Apply what is waiting; False if the storage could not take all of it."""
        # Cancelled (its loop shutting down) with refunds taken, some perhaps sent and
        # applied: counted unknown, never sent again, never gone without a count.
        with queue.taking() as waiting:
            outcomes = [self._ops.apply(refund) for refund in waiting]
            later = [index for index, outcome in enumerate(outcomes) if is_pending(outcome)]
            if later:
                answers = await asyncio.gather(*(outcomes[index] for index in later))
                for index, outcome in zip(later, answers, strict=True):
                    outcomes[index] = outcome
            return self._core.settle_refunds(queue, waiting, outcomes)

    def _schedule(self) -> None:
        """Start the loop's refund task unless it runs (it takes what is queued meanwhile).

        A task of another loop does not count: that loop may be closed with the task left
        pending for good (``run_until_complete`` then ``close()``)."""
        task = self._task
        loop = asyncio.get_running_loop()
        if task is None or task.done() or task.get_loop() is not loop:
            self._task = loop.create_task(self._drain())

    async def _drain(self) -> None:
        queue = self._core.refunds
        if queue is None:
            return
        while len(queue):
            if not await self._apply(queue):  # the storage could not take some: again later
                await asyncio.sleep(_RETRY_INTERVAL)


def _refund_thread(ref: weakref.ReferenceType[Limiter], pending: threading.Event) -> None:
    """A limiter's refund thread: applies what is queued, retries what the storage could
    not take, and ends when idle (or when the limiter is gone)."""
    while True:
        if not pending.wait(_IDLE_THREAD):
            limiter = ref()
            if limiter is None:
                return
            if not limiter.refund_queue and _end_refund_thread(limiter, pending):
                return  # idle: the next refund starts a thread again
            del limiter
            continue
        pending.clear()
        limiter = ref()
        if limiter is None:
            return
        queue = limiter.refund_queue
        if queue is not None and not limiter._apply(queue):  # some could not be: again later
            time.sleep(_RETRY_INTERVAL)
            pending.set()
        del limiter


def _end_refund_thread(limiter: Limiter, pending: threading.Event) -> bool:
    """Whether the idle refund thread may end. It gives up its place first, then looks once
    more: a refund queued meanwhile either saw no thread and started one (this one ends) or
    set ``pending`` before this look (this one takes its place back and goes on). Without the
    second look, a refund queued as the thread ended would wait for the next one."""
    with _STARTING:
        limiter._thread = None
    if not pending.is_set() and not limiter.refund_queue:
        return True
    return not _take_place_back(limiter)


def _take_place_back(limiter: Limiter) -> bool:
    """The idle thread goes on as the limiter's refund thread, unless another was started."""
    with _STARTING:
        if limiter._thread is not None:
            return False  # another thread was started for the refund
        limiter._thread = threading.current_thread()
        return True


def _flush_at_exit() -> None:
    """A last try at the refunds still waiting, bounded; what is left is logged lost."""
    deadline = time.monotonic() + _EXIT_FLUSH
    for limiter in list(_LIMITERS):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        limiter.flush(timeout=left)


def _reset_in_child() -> None:
    global _STARTING  # a lock another thread held at fork stays held
    _STARTING = threading.Lock()


atexit.register(_flush_at_exit)
os.register_at_fork(after_in_child=_reset_in_child)
