"""The leases this process holds: their ids (:func:`new_lease_id`) and their renewal
(:class:`LeaseKeeper`, every ``ttl / 3``)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import os
import secrets
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any

from quotaql.storage.base import check_lease, check_names, check_ttl

if TYPE_CHECKING:
    from collections.abc import Awaitable, Generator, Iterable, Sequence

    from quotaql.storage.base import AsyncLeases, Leases

__all__ = ["RENEW_BATCH", "LeaseKeeper", "new_lease_id"]

RENEW_BATCH = 500  # leases per renew call of the keeper (a call is atomic: keep it short)

# -- lease ids -------------------------------------------------------------------------------


class _Ids:
    """This process's lease-id token and counter (both new in a forked child)."""

    __slots__ = ("counter", "token")

    def __init__(self) -> None:
        self.token = secrets.token_urlsafe(9)  # 72 random bits, 12 characters
        self.counter = itertools.count(1)  # next() is atomic under the GIL


_ids = _Ids()


def new_lease_id() -> str:
    """A lease id no other call makes, in this process or any other: a random per-process
    token and a counter (``"Xq3…-1f"``). A forked child draws a token of its own."""
    ids = _ids
    return f"{ids.token}-{next(ids.counter):x}"


# -- the keeper ------------------------------------------------------------------------------

_Group = tuple[str | None, tuple[str, ...]]  # (tenant, limit names)
_Call = tuple[str | None, tuple[str, ...], list[str]]  # a renew call: (tenant, names, leases)
_Answer = int | BaseException | None  # what a renew call returned or raised (None: none made)


class _LoopState:
    """What the keeper holds for one event loop (async leases) or for its thread (sync)."""

    __slots__ = ("cursor", "groups", "task")

    def __init__(self) -> None:
        # (tenant, names) -> its leases, in the order they were held (a dict as an ordered set)
        self.groups: dict[_Group, dict[str, None]] = {}
        self.task: asyncio.Task[None] | None = None
        self.cursor = 0  # the group the next round starts with: rounds cut short rotate


class LeaseKeeper:
    """Renews the leases this process holds, so long operations and open subscriptions keep
    them, while a crashed process stops renewing and its leases expire within ``ttl_ms``.

    The gate calls :meth:`hold` when it has taken a lease and :meth:`drop` before it
    releases it. Every ``period_ms`` (``ttl_ms / 3`` by default) the keeper renews every
    held lease: one ``renew`` call per (tenant, limit names) group (at most
    :data:`RENEW_BATCH` leases per call), for at most ``period_ms`` in all (a dead Redis that
    makes each call wait its timeout cuts a round short; the next round starts with the
    groups this one did not reach). For synchronous leases it runs in a daemon thread; for
    asynchronous ones in a task of each event loop that holds leases (a loop's leases are
    renewed on that loop, whose connections they use). Both start at the first hold and stop
    at :meth:`close`.

    A lease dropped before a round starts is never renewed again; one dropped while a renew
    of its group is on its way may be renewed by that call, which never brings back a lease
    released meanwhile (renew only moves live leases), so a lease whose release failed lives
    at most one more ``ttl_ms``. Errors never stop the keeper: a failed call is counted and
    retried next round. In a forked child the keeper holds nothing (the parent still renews
    its own leases) and starts again at the child's first hold.

    Example:
        >>> from quotaql.storage import LeaseSpec, MemoryLeases
        >>> leases = MemoryLeases()
        >>> keeper = LeaseKeeper(leases, ttl_ms=30_000)
        >>> leases.take("acme", [LeaseSpec("tier", 4)], "op-1", 30_000).taken
        True
        >>> keeper.hold("acme", ["tier"], "op-1")
        >>> len(keeper)
        1
        >>> keeper.drop("acme", ["tier"], "op-1")
        True
        >>> keeper.close()

    Args:
        leases: the lease sets (:class:`~quotaql.storage.memory_leases.MemoryLeases`,
            :class:`~quotaql.storage.redis_leases.RedisLeases`,
            :class:`~quotaql.storage.redis_leases.AsyncRedisLeases`).
        ttl_ms: the ttl each renewal gives (the one the leases were taken with).
        period_ms: ms between rounds; ``ttl_ms // 3`` by default. Must be below ``ttl_ms``.

    Attributes:
        renewed: (lease, limit) entries renewed.
        lost: (lease, limit) entries a renewal found gone: expired before it (a stall longer
            than the ttl, an outage) or released elsewhere; the release reports them too.
        renew_failed: renew calls that failed (the storage's errors, or any other).
        last_error: the last such error, or None.
    """

    def __init__(
        self, leases: Leases | AsyncLeases, ttl_ms: int, *, period_ms: int | None = None
    ) -> None:
        check_ttl(ttl_ms)
        if period_ms is None:
            period_ms = max(1, ttl_ms // 3)
        if type(period_ms) is not int or not 0 < period_ms < ttl_ms:
            raise ValueError(
                f"period_ms must be an integer from 1 to {ttl_ms - 1} (below ttl_ms),"
                f" got {period_ms!r}"
            )
        self.leases = leases
        self.ttl_ms = ttl_ms
        self.period_ms = period_ms
        self.is_async = inspect.iscoroutinefunction(leases.renew)
        self.renewed = 0
        self.lost = 0
        self.renew_failed = 0
        self.last_error: BaseException | None = None
        self._closed = False
        self._setup()
        _keepers.add(self)

    def _setup(self) -> None:
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sync = _LoopState()  # the thread's groups
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopState] = (
            weakref.WeakKeyDictionary()
        )

    def _forked(self) -> None:
        """In a forked child: the parent's leases are the parent's to renew, its thread and
        its tasks are not ours (a task copied with a running loop sees it and ends)."""
        self._setup()

    def __len__(self) -> int:
        """The leases held (a lease held in several groups counts in each)."""
        with self._lock:
            states = [self._sync, *self._loops.values()]
            return sum(len(leases) for state in states for leases in state.groups.values())

    def hold(self, key: str | None, names: Sequence[str], lease: str) -> None:
        """Renew ``lease`` in the sets of ``names`` from now on, until :meth:`drop`.

        Asynchronous leases: called from the event loop whose task is to renew it.

        Raises:
            RuntimeError: the keeper is closed, or (async) no event loop is running.
            ValueError, TypeError: ``names`` or ``lease`` is not valid.
        """
        group = (key, check_names(names))
        check_lease(lease)
        loop = asyncio.get_running_loop() if self.is_async else None  # RuntimeError if none
        with self._lock:
            if self._closed:
                raise RuntimeError("the LeaseKeeper is closed")
            if loop is None:
                state = self._sync
                if self._thread is None or not self._thread.is_alive():
                    self._thread = threading.Thread(
                        target=self._run, args=(self._stop,), name="quotaql-lease-keeper"
                    )
                    self._thread.daemon = True
                    self._thread.start()
            else:
                state = self._loops.setdefault(loop, _LoopState())
                if state.task is None or state.task.done():
                    state.task = loop.create_task(self._run_async(loop, state))
            state.groups.setdefault(group, {})[lease] = None

    def drop(self, key: str | None, names: Sequence[str], lease: str) -> bool:
        """Stop renewing ``lease`` held with this ``key`` and ``names`` (in the order
        :meth:`hold` was given): False if it was not held so."""
        group = (key, tuple(names))
        loop = _running_loop() if self.is_async else None
        with self._lock:
            states = [self._sync] if loop is None else [self._loops.get(loop)]
            if self.is_async:  # a lease held from another loop is found there too
                states.extend(self._loops.values())
            for state in states:
                if state is None:
                    continue
                leases = state.groups.get(group)
                if leases is not None and lease in leases:
                    del leases[lease]
                    if not leases:
                        del state.groups[group]
                    return True
        return False

    def close(self) -> None:
        """Stop renewing (every lease still held then expires within its ttl): stop the
        thread, cancel the tasks. Idempotent."""
        with self._lock:
            self._closed = True
            thread, self._thread = self._thread, None
            states = [self._sync, *self._loops.values()]
            loops = list(self._loops.items())
            for state in states:
                state.groups.clear()
        self._stop.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)
        current = _running_loop()
        for loop, state in loops:
            task = state.task
            if task is None or task.done():
                continue
            if loop is current or not loop.is_running():
                task.cancel()
            else:  # a loop running in another thread
                with contextlib.suppress(RuntimeError):  # closed meanwhile
                    loop.call_soon_threadsafe(task.cancel)

    async def aclose(self) -> None:
        """:meth:`close`, and wait for the current loop's task to end."""
        state = self._loops.get(asyncio.get_running_loop())
        task = None if state is None else state.task
        self.close()
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- rounds --------------------------------------------------------------------------

    def _run(self, stop: threading.Event) -> None:
        """The thread: :meth:`_rounds` with plain calls, until stopped (or forked away)."""
        rounds = self._rounds(self._sync)
        answer: _Answer = None
        while not stop.is_set():
            call = rounds.send(answer)
            if call is None:
                stop.wait(self.period_ms / 1000)
                answer = None
            else:
                answer = self._attempt(call)

    async def _run_async(self, loop: asyncio.AbstractEventLoop, state: _LoopState) -> None:
        """A loop's task: :meth:`_rounds` with awaits, until cancelled (or forked away)."""
        me = asyncio.current_task()
        rounds = self._rounds(state)
        answer: _Answer = None
        try:
            while True:
                call = rounds.send(answer)
                if call is not None:
                    answer = await self._attempt(call)
                    continue
                await asyncio.sleep(self.period_ms / 1000)
                if self._loops.get(loop) is not state or state.task is not me:
                    return  # forked, or replaced
                answer = None
        finally:
            if state.task is me:  # the state no longer refers to the loop (a weak key)
                state.task = None

    def _rounds(self, state: _LoopState) -> Generator[_Call | None, _Answer, None]:
        """The keeper's work on its thread or on one event loop, one body for both: a round
        every period. Yields None to wait a period, then each renew call of the round, and is
        sent what the call returned or raised (errors never stop the keeper)."""
        while True:
            yield None
            for group, chunk in self._round(state):
                answer = yield group[0], group[1], chunk
                if isinstance(answer, BaseException):
                    self._failed(answer)
                elif answer is not None:
                    self._done(answer, len(group[1]) * len(chunk))

    def _attempt(self, call: _Call) -> Any:
        """Make a renew call: what it returned or the error it raised (async: an awaitable
        of either)."""
        try:
            answer = self.leases.renew(*call, self.ttl_ms)
        except Exception as exc:  # handed to _rounds, which counts it
            return exc
        return _caught(answer) if inspect.isawaitable(answer) else answer

    def _round(self, state: _LoopState) -> Iterable[tuple[_Group, list[str]]]:
        """The renew calls of one round: each group's leases still held when its call is
        made, in chunks, starting with the group after the last one reached; at most one
        period long."""
        with self._lock:
            order = list(state.groups)
        if not order:
            return
        start = state.cursor % len(order)
        deadline = time.monotonic() + self.period_ms / 1000
        for step in range(len(order)):
            group = order[(start + step) % len(order)]
            state.cursor = start + step
            with self._lock:
                leases = list(state.groups.get(group, ()))
            for i in range(0, len(leases), RENEW_BATCH):
                with self._lock:  # dropped since: not renewed
                    held = state.groups.get(group, {})
                    chunk = [lease for lease in leases[i : i + RENEW_BATCH] if lease in held]
                if chunk:
                    yield group, chunk
                if time.monotonic() > deadline:
                    state.cursor = start + step + (i + RENEW_BATCH >= len(leases))
                    return
        state.cursor = start + len(order)

    def _done(self, renewed: int, asked: int) -> None:
        with self._lock:
            self.renewed += renewed
            self.lost += max(0, asked - renewed)

    def _failed(self, exc: BaseException) -> None:
        with self._lock:
            self.renew_failed += 1
            self.last_error = exc


async def _caught(answer: Awaitable[int]) -> int | BaseException:
    """What an awaited renew call returned, or the error it raised (not a cancellation)."""
    try:
        return await answer
    except Exception as exc:  # handed to _rounds, which counts it
        return exc


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


_keepers: weakref.WeakSet[LeaseKeeper] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    global _ids
    _ids = _Ids()
    for keeper in list(_keepers):
        keeper._forked()


os.register_at_fork(after_in_child=_after_fork_in_child)
