"""The concurrency limiter: leases (``max_in_flight``) through the same circuit breaker and
fail modes as the rate limiter's debits.

An operation of a tier with a concurrency limit takes a lease in each of its lease sets
before it runs and gives it back when it ends; a :class:`~quotaql.storage.keeper.LeaseKeeper`
renews what is held meanwhile. A lease storage that can fail is called through the rate
limiter's breaker (one view of the backend's health); when it fails, the fail mode decides:
``open`` runs without a lease, ``closed`` refuses, ``local`` takes the lease in this
process's own sets, each ``max(1, ceil(maximum × local_share))``, as rate quotas start from
their share. A take that failed may have been taken anyway (a call that timed out may still
run): that "stray" take is released there too, once the operation ends.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import math
import threading
import weakref
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from quotaql._flow import drive, is_pending
from quotaql.errors import StorageError
from quotaql.instrumentation import names
from quotaql.limiter.flows import STORAGE_ERRORS
from quotaql.storage.base import is_fallible, supports_leases
from quotaql.storage.leases import (
    LeaseKeeper,
    LeaseResult,
    LeaseSpec,
    MemoryLeases,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Generator

    from quotaql.limiter.rate import AsyncLimiter, Limiter
    from quotaql.storage.leases import AsyncLeases, Leases

__all__ = ["UNAVAILABLE", "ConcurrencyLimiter", "Lease", "LeaseRecorder", "Taken"]


# Most local specs (a spec scaled by local_share) kept, to build each once.
_LOCAL_SPECS = 4096


class Lease(NamedTuple):
    """A concurrency lease one operation holds while it runs.

    ``leases`` is where it was taken (the lease storage, or the process-local one of the
    ``local`` fail mode), None when it holds none there (``open`` and ``closed`` after the
    storage failed); ``stray`` is the storage whose take failed: the lease may have been
    taken there anyway, so it is released there too, when the operation ends.
    """

    id: str
    key: str
    names: tuple[str, ...]
    leases: Any
    keeper: LeaseKeeper | None
    tier: str
    in_flight: int
    stray: Any = None


class Taken(NamedTuple):
    """What a take answered: the storage's result (None: the storage failed and the fail
    mode takes none), the storage it was taken in, the specs asked of it."""

    result: LeaseResult | None
    leases: Any
    specs: tuple[LeaseSpec, ...]
    stray: Any  # the storage that failed, else None


# The lease storage failed or its breaker is open: no answer from it.
UNAVAILABLE: Any = object()


class LeaseRecorder(Protocol):
    """What the concurrency limiter tells about its leases (the gate's metrics and log)."""

    def leases(self, outcome: str) -> None:
        """A lease was taken, refused, released... (``names.LEASE_OUTCOMES``)."""

    def in_flight(self, tier: str, count: int) -> None:
        """This process now holds ``count`` leases of ``tier``."""

    def watch_leases(self, keeper: LeaseKeeper) -> None:
        """A keeper started renewing leases."""

    def lease_expired(self, lease: Lease, live_in: int, span: Any) -> None:
        """``lease`` expired before its operation ended (live in ``live_in`` of its sets)."""


class ConcurrencyLimiter:
    """Takes, renews and gives back the concurrency leases of one gate.

    Args:
        rates: the rate limiter whose circuit breaker (one view of the backend's health),
            fail mode (``open``, ``closed``, ``local``), local share and recorder (backend
            errors, breaker changes) the leases go through too.
        events: told of what became of each lease (metrics, logs).
    """

    def __init__(self, rates: Limiter | AsyncLimiter, events: LeaseRecorder) -> None:
        self.rates = rates.core
        self.events = events
        self.ttl_ms = 0
        self.store: Any = None  # the lease storage, once a tier has a concurrency limit
        self.is_async = False
        self._fallible = False
        self._backend = "memory"
        self._lock = threading.Lock()
        self._keepers: dict[tuple[int, int], LeaseKeeper] = {}  # (id(leases), ttl ms)
        self._local: MemoryLeases | None = None  # the local fail mode's
        self._local_specs: dict[LeaseSpec, LeaseSpec] = {}
        self._in_flight: dict[str, int] = {}  # leases held, per tier
        self.releasing: set[asyncio.Task[None]] = set()  # releases under way
        self._finalizers: dict[int, weakref.finalize[Any, Any]] = {}  # by id(operation)
        self.abandoned: collections.deque[Lease] = collections.deque()

    def configure(self, lease_ttl: float, limited: bool, storage: object) -> bool:
        """Take ``lease_ttl`` (seconds) for the leases taken from now on and, once a tier has
        a concurrency limit (``limited``), the lease storage of ``storage`` (unless
        :meth:`use` gave one): False when ``storage`` has none of its own (its leases are
        then counted in this process's memory)."""
        self.ttl_ms = round(lease_ttl * 1000)
        if self.store is not None or not limited:
            return True
        if supports_leases(storage):
            self.use(storage.leases())
            return True
        self.use(MemoryLeases())
        return not is_fallible(storage)  # a storage of its own kind: leases per process

    def use(self, leases: Leases | AsyncLeases) -> None:
        """Keep the leases in ``leases``."""
        self.store = leases
        self.is_async = inspect.iscoroutinefunction(leases.take)
        self._fallible = is_fallible(leases)
        self._backend = getattr(leases, "name", type(leases).__name__)

    # -- taking --------------------------------------------------------------------------

    def take(self, key: str, specs: tuple[LeaseSpec, ...], lease: str) -> Any:
        """Take ``lease`` in the sets of ``specs``: a :class:`Taken`, or an awaitable of one
        (async lease storage). A storage failure (or an open breaker) is answered by the
        fail mode here, never raised."""
        if self.abandoned:  # operations dropped unfinished: their leases first
            self._release_abandoned()
        leases = self.store
        if self.is_async:
            return self._take_async(leases, key, specs, lease)
        if not self._fallible:
            return self._took(key, specs, lease, leases.take(key, specs, lease, self.ttl_ms),
                              leases)  # fmt: skip
        result = self._guarded(leases.take, key, specs, lease, self.ttl_ms)
        return self._took(key, specs, lease, result, leases)

    async def _take_async(
        self, leases: Any, key: str, specs: tuple[LeaseSpec, ...], lease: str
    ) -> Taken:
        # The take runs to its answer even when its caller leaves (cancelled), and only then
        # is its lease given back: released at once, the release could reach Redis first
        # (on the pipeline's other connection, or while a NOSCRIPT take is sent again) and
        # the lease be taken after it, held until its ttl.
        call = asyncio.ensure_future(self._guarded(leases.take, key, specs, lease, self.ttl_ms))
        try:
            result = await asyncio.shield(call)
        except BaseException:
            self.spawn(self._release_when_answered(call, key, specs, lease, leases))
            raise
        return self._took(key, specs, lease, result, leases)

    async def _release_when_answered(
        self,
        call: asyncio.Future[Any],
        key: str,
        specs: tuple[LeaseSpec, ...],
        lease: str,
        leases: Any,
    ) -> None:
        """The take of a caller that left, once answered: what it may have taken goes back
        (a refusal took nothing; a failure may have taken it anyway)."""
        try:
            result = await call
        except Exception:  # no answer to go by
            result = UNAVAILABLE
        if result is UNAVAILABLE or result.taken:  # given back as a stray take is
            names_ = tuple(spec.name for spec in specs)
            done = self.give_back(Lease(lease, key, names_, None, None, "", 0, leases))
            if done is not None:
                await done

    def _took(
        self, key: str, specs: tuple[LeaseSpec, ...], lease: str, result: Any, leases: Any
    ) -> Taken:
        """What a take answered: held by the keeper when taken; the fail mode when the
        storage did not answer (``local``: a lease in this process's sets)."""
        events = self.events
        if result is not UNAVAILABLE:
            events.leases(names.LEASE_TAKEN if result.taken else names.LEASE_REFUSED)
            if result.taken:
                self.keeper_of(leases).hold(key, [spec.name for spec in specs], lease)
            return Taken(result, leases, specs, None)
        events.leases(names.LEASE_TAKE_FAILED)
        if self.rates.on_backend_error != "local":
            return Taken(None, None, specs, leases)
        local = self._local_leases()
        mine = self._scaled(specs)
        taken = local.take(key, mine, lease, self.ttl_ms)
        events.leases(names.LEASE_TAKEN if taken.taken else names.LEASE_REFUSED)
        if taken.taken:
            self.keeper_of(local).hold(key, [spec.name for spec in mine], lease)
        return Taken(taken, local, mine, leases)

    def keeper_of(self, leases: Any) -> LeaseKeeper:
        """The keeper that renews what ``leases`` holds, with the ``lease_ttl`` in force
        (one per storage and ttl: a reload that changes the ttl renews new leases with it)."""
        slot = (id(leases), self.ttl_ms)
        keeper = self._keepers.get(slot)
        if keeper is None:
            with self._lock:
                keeper = self._keepers.get(slot)
                if keeper is None:
                    keeper = self._keepers[slot] = LeaseKeeper(leases, self.ttl_ms)
                    self.events.watch_leases(keeper)
        return keeper

    def _local_leases(self) -> MemoryLeases:
        """The process-local lease sets of the ``local`` fail mode."""
        local = self._local
        if local is None:
            with self._lock:
                local = self._local
                if local is None:
                    local = self._local = MemoryLeases()
        return local

    def _scaled(self, specs: tuple[LeaseSpec, ...]) -> tuple[LeaseSpec, ...]:
        """``specs`` as this process enforces them alone: ``max(1, ceil(maximum ×
        local_share))`` each."""
        cache = self._local_specs
        local = []
        for spec in specs:
            mine = cache.get(spec)
            if mine is None:
                mine = LeaseSpec(
                    spec.name, max(1, math.ceil(spec.maximum * self.rates.local_share))
                )
                if len(cache) < _LOCAL_SPECS:
                    cache[spec] = mine
            local.append(mine)
        return tuple(local)

    # -- the breaker ---------------------------------------------------------------------

    def _guarded(self, method: Callable[..., Any], *args: Any) -> Any:
        """``method(*args)`` on a lease storage that can fail, through the breaker: its
        result, or ``UNAVAILABLE`` (or an awaitable of either, on an async storage)."""
        return drive(self._through_breaker(method, args), _call, STORAGE_ERRORS)

    def _through_breaker(
        self, method: Callable[..., Any], args: tuple[Any, ...]
    ) -> Generator[Any, Any, Any]:
        breaker = self.rates.breaker
        if not breaker.allow():
            return UNAVAILABLE
        try:
            result = yield method, args
        except StorageError as error:
            self.rates.failed(error, self._backend)
            return UNAVAILABLE
        except BaseException:  # cancelled, or a bug: the breaker's probe is not spent
            breaker.abandon()
            raise
        if breaker.success():
            self.rates.recorder.circuit(self._backend, False)
        return result

    # -- giving back ---------------------------------------------------------------------

    def give_back(self, lease: Lease, span: Any = None) -> Coroutine[Any, Any, None] | None:
        """Stop renewing ``lease`` and release it (and its stray take): None when done, or a
        coroutine that does it (an async lease storage). ``span``: where an expired lease
        is noted."""
        held = lease.leases
        if held is not None and lease.keeper is not None:
            lease.keeper.drop(lease.key, lease.names, lease.id)
            self.held(lease.tier, -1)
        if self.is_async and (held is self.store or lease.stray is not None) and not _loop():
            self.events.leases(names.LEASE_RELEASE_FAILED)  # no loop to await it: it expires
            return None
        done = drive(self._giving_back(lease, span), _call, STORAGE_ERRORS)
        return done if is_pending(done) else None

    def _giving_back(self, lease: Lease, span: Any) -> Generator[Any, Any, None]:
        held = lease.leases
        if held is not None:
            count = yield from self._release_in(held, lease)
            self._released(lease, count, span)
        stray = lease.stray
        if stray is not None and stray is not held:
            yield from self._release_in(stray, lease)

    def _release_in(self, leases: Any, lease: Lease) -> Generator[Any, Any, Any]:
        """Release ``lease`` in ``leases``: in how many sets it was live, or
        ``UNAVAILABLE``."""
        if not is_fallible(leases):  # it cannot fail: no breaker
            return leases.release(lease.key, lease.names, lease.id)
        return (yield from self._through_breaker(leases.release, (lease.key, lease.names,
                                                                 lease.id)))  # fmt: skip

    def _released(self, lease: Lease, count: Any, span: Any) -> None:
        """Count what a release found: live in every set, expired in one (a stall or an
        outage longer than ``lease_ttl``), or not made (the storage failed)."""
        if count is UNAVAILABLE:
            self.events.leases(names.LEASE_RELEASE_FAILED)
        elif count >= len(lease.names):
            self.events.leases(names.LEASE_RELEASED)
        else:
            self.events.leases(names.LEASE_EXPIRED)
            self.events.lease_expired(lease, count, span)

    def release_later(self, lease: Lease) -> None:
        """Release ``lease`` without waiting for it (a flow being closed cannot await)."""
        done = self.give_back(lease)
        if done is not None:
            self.spawn(done)

    def spawn(self, coroutine: Coroutine[Any, Any, None], span: Any = None) -> None:
        """Run a release coroutine as a task of the running loop (kept until it ends), then
        end ``span`` (if any); with no loop running, it cannot run: its lease expires within
        ``lease_ttl`` (and the span ends now)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            coroutine.close()
            self.events.leases(names.LEASE_RELEASE_FAILED)
            if span is not None:
                span.end()
            return
        task = loop.create_task(coroutine if span is None else _then_end(coroutine, span))
        self.releasing.add(task)
        task.add_done_callback(self.releasing.discard)

    # -- operations dropped unfinished -----------------------------------------------------

    def watch(self, owner: object, lease: Lease) -> None:
        """Should ``owner`` (an operation) be dropped without being finished, ``lease`` is
        given back rather than renewed for good."""
        self._finalizers[id(owner)] = weakref.finalize(owner, self._dropped, id(owner), lease)

    def _dropped(self, ident: int, lease: Lease) -> None:
        """An operation holding ``lease`` was collected unfinished (in a garbage collection:
        no lock here, the lease is only queued: the next take gives it back)."""
        self._finalizers.pop(ident, None)
        self.abandoned.append(lease)

    def unwatch(self, owner: object) -> None:
        """``owner`` ends as it should: its lease is given back by whoever ends it."""
        finalizer = self._finalizers.pop(id(owner), None)
        if finalizer is not None:
            finalizer.detach()

    def _release_abandoned(self) -> None:
        """Give back the leases of operations dropped without being finished (their
        finalizers only queue them: no lock is taken in a garbage collection)."""
        abandoned = self.abandoned
        while abandoned:
            try:
                lease = abandoned.popleft()
            except IndexError:
                return
            self.release_later(lease)

    # -- what is held ----------------------------------------------------------------------

    def held(self, tier: str, change: int) -> None:
        """Follow the leases this process holds, per tier (``quotaql_in_flight``)."""
        with self._lock:
            count = self._in_flight.get(tier, 0) + change
            self._in_flight[tier] = count
        self.events.in_flight(tier, count)

    def in_flight(self) -> dict[str, int]:
        """The leases this process holds now, per tier."""
        with self._lock:
            return {tier: count for tier, count in self._in_flight.items() if count}

    @property
    def keepers(self) -> tuple[LeaseKeeper, ...]:
        """The keepers renewing the leases this process holds."""
        return tuple(self._keepers.values())


def _call(step: tuple[Callable[..., Any], tuple[Any, ...]]) -> Any:
    """Make one lease storage call a flow asked for (its result, or an awaitable of it)."""
    method, args = step
    return method(*args)


async def _then_end(coroutine: Coroutine[Any, Any, None], span: Any) -> None:
    try:
        await coroutine
    finally:
        span.end()


def _loop() -> bool:
    """An event loop runs in this thread (an async lease storage can be awaited)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
