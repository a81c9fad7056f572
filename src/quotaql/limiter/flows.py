"""The limiter's flows, one body for sync and async storages: each operation (acquire,
refund, peek) is a generator that yields the storage calls it needs and receives their
results; :class:`Core` holds what both limiters share (validation, fail modes, the local
fallback, the refund queue) and a small driver runs a flow with plain calls or awaits.

The ``local`` fail mode never hands a tenant a fresh, full bucket: the limiter remembers
what the storage last reported of each (tenant, quota) it decided (a bounded LRU of
:data:`MAX_REPORTS`), and the fallback starts each state of an outage from that report,
or from ``capacity * local_share`` for a state never reported (see :class:`_Substitute`).
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
import time
from collections.abc import Awaitable, Callable, Generator, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, cast

from quotaql._flow import drive, is_pending
from quotaql.errors import ConfigError, StorageError, StorageNotReached, StorageTimeout
from quotaql.instrumentation.names import SHARD_CALLED, SHARD_RETRIED, SHARD_SPARED
from quotaql.limiter.breaker import CircuitBreaker
from quotaql.limiter.deny import ShardDenials
from quotaql.limiter.recorder import NullRecorder, Recorder, decision_hook
from quotaql.limiter.refunds import DEFAULT_MAX_AGE, DEFAULT_MAX_ENTRIES, PendingRefund, RefundQueue
from quotaql.limiter.shards import (
    pinned_to_decision,
    refused_here,
    retried,
    shard_debit,
    spared,
)
from quotaql.policy.modes import BackendErrorMode
from quotaql.policy.quota import Decision, Quota, QuotaStatus, Source
from quotaql.storage.base import Debit, check_arguments, is_fallible
from quotaql.storage.keys import tenant_part
from quotaql.storage.memory import MemoryStorage

if TYPE_CHECKING:
    from quotaql.limiter.options import AcquireOptions as Acquire
    from quotaql.limiter.options import RefundOptions

__all__ = ["DEFAULT_LOCAL_SHARE", "MAX_REPORTS", "BackendErrorMode"]

_MODES = ("open", "closed", "local")
DEFAULT_LOCAL_SHARE = 0.1
# Most (tenant, quota) reports the limiter keeps for the local fallback, least recently
# reported first out; an entry is a key string and a (remaining, ms) pair: ~200 bytes.
MAX_REPORTS = 100_000

# tuple.__new__ builds a Debit without its Python-level __new__ (every field given): half
# the time, on every request.
_new = tuple.__new__

# What became of a waiting refund the limiter tried: applied; not sent (the breaker was open,
# the storage took nothing), to be tried again; or unknown (sent, then the call failed: it
# may have been applied), dropped and counted lost rather than risk applying it twice.
_Outcome = Literal["applied", "retry", "unknown"]

# One storage call a flow asks for: the method ("acquire", "refund", "peek") and its debit.
_Call = tuple[str, Debit]
_Flow = Generator[_Call, Any, Decision | None]


class Core:
    """What the sync and async limiters share: validation, flows, fail modes."""

    def __init__(
        self,
        storage: Any,
        *,
        on_backend_error: BackendErrorMode = "local",
        breaker: CircuitBreaker | None = None,
        fallback: MemoryStorage | None = None,
        recorder: Recorder | None = None,
        local_share: float = DEFAULT_LOCAL_SHARE,
        open_cap: float | None = None,
        defer_refunds: bool = True,
        refund_max_age: float = DEFAULT_MAX_AGE,
        refund_queue_size: int = DEFAULT_MAX_ENTRIES,
    ) -> None:
        if not isinstance(defer_refunds, bool):
            raise ConfigError(f"defer_refunds must be True or False, got {defer_refunds!r}")
        if on_backend_error not in _MODES:
            raise ConfigError(
                f"on_backend_error must be one of {', '.join(_MODES)}, got {on_backend_error!r}"
            )
        if not _is_share(local_share) or not 0 <= local_share <= 1:
            raise ConfigError(f"local_share must be a number from 0 to 1, got {local_share!r}")
        if open_cap is not None and (not _is_share(open_cap) or not 0 < open_cap <= 1):
            raise ConfigError(
                f"open_cap must be a number above 0 and at most 1, or None, got {open_cap!r}"
            )
        self.local_share = float(local_share)
        self.open_cap = None if open_cap is None else float(open_cap)
        self.storage = storage
        self.on_backend_error: BackendErrorMode = on_backend_error
        self.breaker = breaker if breaker is not None else CircuitBreaker()
        # Not `fallback or ...`: an empty MemoryStorage is falsy (it has a length).
        self.fallback = fallback if fallback is not None else MemoryStorage(source="fallback")
        self.recorder: Recorder = recorder if recorder is not None else NullRecorder()
        # The shards of sharded shared quotas remembered empty, and their calls counted.
        self.shard_denials = ShardDenials(getattr(self.recorder, "shard_calls", None))
        # Who is told each decision and how long it took (None: nobody listens: untimed).
        self.tell = decision_hook(self.recorder)
        self.backend: str = getattr(storage, "name", type(storage).__name__)
        # A storage whose calls cannot fail (process memory): no breaker, no fail mode.
        self.infallible = not is_fallible(storage)
        # Its decision of checked arguments: the storage's decide when it has one (the memory
        # storage's), which spares building a Debit (0.2 µs, a tenth of a memory decision).
        self.decide: Callable[..., Decision] = getattr(storage, "decide", None) or (
            lambda *debit: storage.acquire(Debit(*debit))
        )
        # Its refund of a checked debit: the storage's give_back when it has one (the memory
        # storage's, which does not check the arguments again) and a subclass did not
        # override refund without it, else its refund (looked up at each call, as it was).
        give_back = getattr(storage, "give_back", None)
        if give_back is None or _owner(type(storage), "refund") is not _owner(
            type(storage), "give_back"
        ):
            give_back = lambda debit: storage.refund(debit)  # noqa: E731, PLW0108
        self.give_back: Callable[[Debit], None] = give_back
        # Refunds of the storage's debits, waiting to be applied off the response path
        # (None: applied at once; the memory storage needs no round trip).
        self.refunds: RefundQueue | None = None
        if defer_refunds and not self.infallible:
            try:
                self.refunds = RefundQueue(
                    max_age=refund_max_age, max_entries=refund_queue_size, on_dropped=self.dropped
                )
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        # What the storage last reported per (tenant, quota), least recently first, for the
        # local fallback: (remaining, when in the fallback's clock, ms).
        self.reports: dict[str, tuple[float, int]] = {}
        self.remembering = on_backend_error == "local" and not self.infallible
        self.remember_hook: _Remember | None = self.remember if self.remembering else None
        # How the driver makes a flow's storage calls: on the storage, on the fallback.
        self.run: Callable[[_Call], Any] = functools.partial(_call, storage)
        self.run_fallback: Callable[[_Call], Any] = functools.partial(_call, self.fallback)
        # What the driver tells of each decision the storage makes (the fallback's reports).
        self.after = None if self.remember_hook is None else _after(self.remember_hook)
        self._seeded: dict[str, None] = {}  # the states this outage has seeded
        self._seed_lock = threading.Lock()
        self._outage = False  # a state was seeded since the storage last answered
        # The fallback as the fail mode uses it, or None (no local decisions).
        self.local: _Substitute | None = None
        if on_backend_error == "local":
            self.local = _Substitute(self, self.local_share, self.reports)
        elif on_backend_error == "open" and self.open_cap is not None:
            self.local = _Substitute(self, self.open_cap, None)
        self.run_local = None if self.local is None else functools.partial(_call, self.local)

    # -- flows: the storage calls each operation needs -----------------------------------

    @staticmethod
    def acquire_flow(debit: Debit, denials: ShardDenials | None = None) -> _Flow:
        own, shared = _split(debit)
        if shared is not None and shared.quotas[0].shards > 1:
            return (yield from _sharded_acquire(own, shared, debit.key, denials))
        decision: Decision = yield ("acquire", own)
        if shared is None or not decision.allowed:
            return decision
        # Shared quotas live on their own slot: a second call; the tenant's debit is
        # undone when it refuses or fails.
        given_back = own._replace(at=decision.at, turn=reserved_turn(decision))
        try:
            shared_decision: Decision = yield ("acquire", shared)
        except StorageError:
            yield ("refund", given_back)
            raise
        if not shared_decision.allowed:
            yield ("refund", given_back)
        return _merge(decision, shared_decision, own_first=bool(own.quotas))

    @staticmethod
    def refund_flow(debit: Debit, applied: list[bool] | None = None) -> _Flow:
        """The refund's calls: the tenant's quotas, then the shared ones (``applied`` is
        told when the first of two calls was made: what is left is the shared part). The
        ``turn`` the debit reserved is the tenant's (shared quotas never wait). Sharded
        shared quotas are given back on the shard their quotas name, else the subject's
        home one."""
        own, shared = _split(debit, sharded=True)
        if own.quotas:
            yield ("refund", own)
            if shared is not None and applied is not None:
                applied.append(True)
        if shared is not None:
            yield ("refund", shared)
        return None

    @staticmethod
    def charge_flow(debit: Debit) -> _Flow:
        """The charge's calls (an operation's overage): the tenant's quotas, then the
        shared ones, each debited whether it fits or not (sharded: on the shard the quotas
        name, else the subject's home one)."""
        own, shared = _split(debit, sharded=True)
        if own.quotas:
            yield ("charge", own)
        if shared is not None:
            yield ("charge", shared)
        return None

    @staticmethod
    def peek_flow(debit: Debit) -> _Flow:
        own, shared = _split(debit, sharded=True)  # sharded: the subject's home shard
        decision: Decision = yield ("peek", own)
        if shared is None:
            return decision
        shared_decision: Decision = yield ("peek", shared)
        return _merge(decision, shared_decision, own_first=bool(own.quotas))

    def refund_elsewhere(self, debit: Debit, decision: Decision) -> None:
        """Give back ``decision``'s debit (``debit`` names its time and turn) when it was
        not made in the storage (:data:`_NOT_STORED`): a debit of the local fallback goes
        back to it; a refusal, a fail-open or a fail-closed decision debited nothing, so
        there is nothing to give back."""
        if decision.allowed and decision.source == "fallback":
            # Its states live as long as the outage: a refund after it finds nothing. The
            # shared quotas were debited in the shared scope: the flow gives theirs back there.
            drive(Core.refund_flow(debit), self.run_fallback, STORAGE_ERRORS)

    @staticmethod
    def charges(decision: Decision | None) -> bool:
        """Whether an overage of ``decision``'s debit is charged: not for a refusal, nor a
        fail-open or fail-closed decision (they debited nothing). A debit of the local
        fallback is charged like any other (:meth:`Operations.execute`): in the storage if
        it answers again, else in the fallback; the work was done either way."""
        if decision is None:
            return True  # a debit made in the storage now
        return decision.allowed and decision.source not in ("fail_open", "fail_closed")

    def dropped(self, outcome: str, count: int, cost: float) -> None:
        """``count`` refunds (``cost`` points) were dropped: ``lost`` or ``unknown``."""
        told = getattr(self.recorder, "refunds", None)
        if told is not None:
            told(outcome, count, cost)

    def settle_refunds(
        self,
        queue: RefundQueue,
        tried: Sequence[PendingRefund],
        outcomes: Sequence[_Outcome | PendingRefund],
    ) -> bool:
        """Count what was applied, drop what may have been, queue again what was not sent
        (an outcome that is a refund: the part of the refund tried still to apply); True
        when nothing is left to retry."""
        pairs = list(zip(tried, outcomes, strict=True))
        applied = [r for r, outcome in pairs if outcome == "applied"]
        unknown = [r for r, outcome in pairs if outcome == "unknown"]
        retry = [
            outcome if isinstance(outcome, PendingRefund) else r
            for r, outcome in pairs
            if isinstance(outcome, PendingRefund) or outcome == "retry"
        ]
        told = getattr(self.recorder, "refunds", None)
        if told is not None and applied:
            told("applied", sum(r.merged for r in applied), sum(r.amount for r in applied))
        if unknown:
            queue.drop(unknown)
        queue.put_back(retry)
        return not retry

    def refund_failed(
        self, error: StorageError, refund: PendingRefund, applied: list[bool]
    ) -> _Outcome | PendingRefund:
        """A refund's call failed: retried only when it is known not to have been sent. A
        call that timed out or broke may still be applied (a paused Redis runs it when it
        resumes): sending it again could give it back twice, so it is not. When the
        tenant's part was applied (``applied``) and the shared part was not sent, only the
        shared part is tried again: the tenant's is never given back twice."""
        self.failed(error)
        if not isinstance(error, StorageNotReached):
            return "unknown"
        if applied:
            return _shared_part(refund)
        return "retry"

    # -- failure handling ----------------------------------------------------------------

    def failed(self, error: StorageError, backend: str | None = None) -> None:
        """Tell the breaker and the recorder that a call to ``backend`` (default: the
        storage's; the concurrency limiter names its lease store) failed."""
        name = self.backend if backend is None else backend
        self.recorder.backend_error(name, error)
        if self.breaker.failure(timeout=isinstance(error, StorageTimeout)):
            self.recorder.circuit(name, True)

    def succeeded(self) -> None:
        if self.breaker.success():
            self.recorder.circuit(self.backend, False)
        if self._outage:
            self.end_outage()

    def substitute(self, flow_factory: Callable[[], _Flow], debit: Debit) -> Decision | None:
        """The fail mode's answer while the storage cannot be used."""
        if self.run_local is not None:  # local, or open with an emergency cap
            decision: Decision | None = drive(flow_factory(), self.run_local, STORAGE_ERRORS)
            return decision
        if self.on_backend_error == "open":
            return _assumed(debit.amount, debit.quotas, "fail_open", allowed=True)
        retry = max(self.breaker.retry_after(), 1.0)
        return _assumed(debit.amount, debit.quotas, "fail_closed", allowed=False, retry_after=retry)

    # -- the storage's reports, and the fallback's seeds -----------------------------------

    def remember(self, debit: Debit, decision: Decision) -> None:
        """Keep what ``decision`` (one storage call's, for ``debit``) says is left of each
        quota."""
        tenant, _, quotas, now, _, _, _ = debit
        at = self.fallback.now() if now is None else now
        reports = self.reports
        part = tenant_part(tenant)  # as the fallback names its states: long keys hashed
        delay = decision.delay
        for quota, status in zip(quotas, decision.quotas, strict=False):
            name = quota.state_name + part
            remaining = status.remaining
            if delay and quota.max_delay and not remaining and quota.refill_per_second:
                # A reservation: the bucket is in debt, by at most the wait's refill (the
                # decision waits for its longest reservation): an outage starts from it.
                remaining = -delay * quota.refill_per_second
            reports.pop(name, None)  # re-inserted last: most recently reported
            reports[name] = (remaining, at)
        if len(reports) > MAX_REPORTS:
            # Threads may race here: one eviction lost is made up for by the next report.
            with contextlib.suppress(KeyError, RuntimeError, StopIteration):
                del reports[next(iter(reports))]

    def seed(
        self,
        tenant: str | None,
        quotas: Sequence[Quota],
        now: int | None,
        share: float,
        reports: dict[str, tuple[float, int]] | None,
    ) -> None:
        """Start each state of ``quotas`` the outage has not met yet in the fallback.

        It starts at what ``reports`` last said was left of it, as of when it said so (the
        fallback's own refill then credits the time since, as the storage would have, and
        nothing more), or at ``capacity * share`` from now for a state never reported. The
        fallback is empty at the start of an outage (:meth:`end_outage`), so one debit of
        the difference on the fresh state, at that time, sets it.
        """
        fallback = self.fallback
        with self._seed_lock:
            self._outage = True
            seeded = self._seeded
            part = tenant_part(tenant)
            for quota in quotas:
                name = quota.state_name + part
                if name in seeded:
                    continue
                report = None if reports is None else reports.get(name)
                if report is None:
                    start = quota.maximum * share
                    at = fallback.now() if now is None else now
                else:
                    start, at = report
                debit = quota.maximum - start
                if debit > quota.maximum:  # in debt (reservations): below empty
                    fallback.charge(Debit(tenant, debit, [quota], at))
                elif debit > 0:
                    fallback.acquire(Debit(tenant, debit, [quota], at))
                seeded[name] = None
                if len(seeded) > MAX_REPORTS:
                    # Forgotten: met again, it is debited again (never given more).
                    del seeded[next(iter(seeded))]

    def end_outage(self) -> None:
        """The storage answered again: forget the fallback's states and seeds.

        The next outage seeds afresh, from the reports of the decisions made since (and,
        for the states this outage's fallback decided and the storage has not reported
        since, from the fallback's last decision, so that flapping never hands out a
        budget twice).
        """
        with self._seed_lock:
            self._outage = False
            self._seeded.clear()
            self.fallback.clear()


class _Substitute:
    """The fallback storage as a fail mode uses it: each (tenant, quota) state is seeded the
    first time an outage meets it, from the storage's last report (``reports``, for
    ``local``) or at ``capacity * share``.

    With ``reports`` (``local``), its own decisions are reports too: after a short recovery
    the next outage starts from what this one left, not from what the storage said before it.
    """

    def __init__(
        self, core: Core, share: float, reports: dict[str, tuple[float, int]] | None
    ) -> None:
        self._core = core
        self._fallback = core.fallback
        self._share = share
        self._reports = reports

    def acquire(self, debit: Debit) -> Decision:
        self._core.seed(debit.key, debit.quotas, debit.now, self._share, self._reports)
        decision = self._fallback.acquire(debit)
        if self._reports is not None:
            self._core.remember(debit, decision)
        return decision

    def refund(self, debit: Debit) -> None:
        self._core.seed(debit.key, debit.quotas, debit.now, self._share, self._reports)
        # A debit made in the storage: the fallback's clock (and lines) another.
        self._fallback.refund(debit._replace(at=None, turn=None))

    def charge(self, debit: Debit) -> None:
        self._core.seed(debit.key, debit.quotas, debit.now, self._share, self._reports)
        self._fallback.charge(debit._replace(at=None, turn=None))

    def peek(self, key: str | None, quotas: Sequence[Quota], now: int | None = None) -> Decision:
        self._core.seed(key, quotas, now, self._share, self._reports)
        decision = self._fallback.peek(key, quotas, now)
        if self._reports is not None:
            self._core.remember(Debit(key, 0.0, quotas, now), decision)
        return decision


def _is_share(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float)


def _split(debit: Debit, *, sharded: bool = False) -> tuple[Debit, Debit | None]:
    """The tenant's own quotas' part of ``debit`` and the shared quotas' part (None: no
    quota is shared), each with its amounts if given. The shared part is in the shared
    scope (no key) and never waited for its turn; with ``sharded``, sharded shared quotas'
    part is on the shard it goes to (:func:`~quotaql.limiter.shards.shard_debit`)."""
    quotas = debit.quotas
    if not any(quota.shared for quota in quotas):
        return debit, None
    own = [quota for quota in quotas if not quota.shared]
    shared = [quota for quota in quotas if quota.shared]
    amounts = debit.amounts
    own_amounts = shared_amounts = None
    if amounts is not None:
        pairs = list(zip(quotas, amounts, strict=True))
        own_amounts = [amount for quota, amount in pairs if not quota.shared]
        shared_amounts = [amount for quota, amount in pairs if quota.shared]
    shared_part = debit._replace(key=None, quotas=shared, amounts=shared_amounts, turn=None)
    if sharded and shared[0].shards > 1:
        shared_part = cast("Debit", shard_debit(shared_part, debit.key))
    return debit._replace(quotas=own, amounts=own_amounts), shared_part


def _sharded_acquire(
    own: Debit, shared: Debit, subject: str | None, denials: ShardDenials | None
) -> _Flow:
    """:meth:`Core.acquire_flow` for sharded shared quotas: the tenant's quotas, then the
    subject's home shard, and its second shard if the home one refused (rate limited) or is
    remembered empty (``denials``); both remembered empty, refused without a call (the
    refusal names the shared quotas only). A debit at a given time (``now``: a simulation's
    clock, not the process's) neither reads nor writes ``denials``."""
    if own.now is not None:
        denials = None
    home = cast("Debit", shard_debit(shared, subject))
    second = shard_debit(shared, subject, second=True)
    targets = [home] if second is None else [home, second]
    cost = shared.amount if shared.amounts is None else max(shared.amounts)
    held: Decision | None = None
    if denials is not None:
        live = []
        for target in targets:
            refusal = denials.held(cast("str", target.key), tuple(target.quotas), cost)
            if refusal is None:
                live.append(target)
            else:
                held = held or refusal
                denials.count(SHARD_SPARED, target.quotas[0].shard)
        if not live:  # every shard it may use is empty: no call at all
            return spared(cast("Decision", held), cost)
        targets = live
    decision: Decision = yield ("acquire", own)
    if not decision.allowed:
        return decision
    given_back = own._replace(at=decision.at, turn=reserved_turn(decision))
    shared_decision = decision
    for target in targets:
        try:
            shared_decision = yield ("acquire", target)
        except StorageError:
            yield ("refund", given_back)
            raise
        if target is second:
            shared_decision = retried(shared_decision)
        if denials is not None:
            denials.answered(cast("str", target.key), tuple(target.quotas), shared_decision)
            outcome = SHARD_RETRIED if target is second else SHARD_CALLED
            denials.count(outcome, target.quotas[0].shard)
        if not refused_here(shared_decision):
            break
    if not shared_decision.allowed:
        yield ("refund", given_back)
    return _merge(decision, shared_decision, own_first=bool(own.quotas))


def _shared_part(refund: PendingRefund) -> PendingRefund:
    """The shared quotas' part of ``refund`` (its tenant's part was applied)."""
    pairs = [(q, a) for q, a in zip(refund.quotas, refund.amounts, strict=True) if q.shared]
    return refund._replace(
        quotas=tuple(quota for quota, _ in pairs), amounts=tuple(amount for _, amount in pairs)
    )


def _check_request(
    key: object, cost: float, quotas: Sequence[Quota], costs: Sequence[float] | None = None
) -> bool:
    """Refuse bad arguments before anything is written; True when a quota is shared.

    The storage is given them checked (the memory storage's ``decide`` and ``give_back``
    do not check them again)."""
    if type(key) is not str:
        raise TypeError(f"key must be a non-empty string, got {type(key).__name__}")
    if not key:
        raise ValueError("key must be a non-empty string, got ''")
    check_arguments(cost, quotas, costs)
    if len(quotas) == 1:
        return quotas[0].shared
    shared = sharded = False
    for quota in quotas:
        if quota.shared:
            shared = True
            sharded = sharded or quota.shards > 1
    if sharded and len({quota.shards for quota in quotas if quota.shared}) > 1:
        raise ValueError("the shared quotas of one request must have the same shards")
    if len(quotas) > 1 and len({quota.name for quota in quotas}) < len(quotas):
        names = [quota.name for quota in quotas]
        twice = sorted({name for name in names if names.count(name) > 1})
        raise ValueError(f"each quota may be given once; same name twice: {', '.join(twice)}")
    return shared


def _merge(first: Decision, second: Decision, *, own_first: bool) -> Decision:
    """One decision from the tenant's and the shared quotas' decisions."""
    if not own_first:
        return second
    statuses = first.quotas + second.quotas
    # The earlier of the two times (a cluster's shared quotas are on another node, with its
    # own clock): a refund dated too early gives back less to a window, never more.
    at = (
        first.at
        if second.at is None or (first.at is not None and first.at <= second.at)
        else second.at
    )
    if not second.allowed:
        return Decision(
            False, second.cost, second.remaining, second.limit, second.retry_after,
            second.reset_after, second.limited_by, second.source, second.reason, statuses, at,
        )  # fmt: skip
    tightest = first if first.remaining <= second.remaining else second
    return Decision(
        True, first.cost, tightest.remaining, tightest.limit, 0.0, tightest.reset_after,
        None, first.source, None, statuses, at, max(first.delay, second.delay),
    )  # fmt: skip


def refund_of(
    key: str, amount: float, quotas: Sequence[Quota], options: RefundOptions
) -> tuple[Debit, Decision | None]:
    """The refund of ``options``' ``decision``'s debit (None: of a debit made in the storage
    now), with that decision: when that debit was made and the turn it reserved come with
    it."""
    now, amounts = options.get("now"), options.get("amounts")
    decision = options.get("decision")
    if decision is None:
        return _new(Debit, (key, amount, quotas, now, amounts, None, None)), None
    turn = reserved_turn(decision) if decision.delay else None  # none unless it waited
    return _new(Debit, (key, amount, quotas, now, amounts, decision.at, turn)), decision


def reserved_turn(decision: Decision) -> int | None:
    """The turn ``decision``'s debit reserved, ms in its storage's clock (``at`` plus its
    wait; None: it did not wait), which a refund of that debit names: the waiter's entry
    leaves the lines of its quotas (see ``Quota.max_queued``)."""
    if decision.delay > 0 and decision.at is not None:
        return decision.at + round(decision.delay * 1000)
    return None


def _assumed(
    cost: float,
    quotas: Sequence[Quota],
    source: Source,
    *,
    allowed: bool,
    retry_after: float = 0.0,
) -> Decision:
    """A decision made without the storage (fail open or closed)."""
    limit = min((quota.maximum for quota in quotas), default=math.inf)
    statuses = tuple(
        QuotaStatus(quota.name, quota.maximum, quota.maximum if allowed else 0.0, 0.0,
                    0.0 if allowed else retry_after, allowed)
        for quota in quotas
    )  # fmt: skip
    return Decision(
        allowed,
        cost,
        limit if allowed else 0.0,
        limit,
        0.0 if allowed else retry_after,
        0.0,
        None,
        source,
        None if allowed else "backend_unavailable",
        statuses,
    )


def _call(storage: Any, call: _Call) -> Any:
    """Make one storage call a flow asked for (its result, or an awaitable of it)."""
    method, debit = call
    if method == "peek":
        return storage.peek(debit.key, debit.quotas, debit.now)
    if method == "refund":
        return storage.refund(debit)
    if method == "charge":
        return storage.charge(debit)
    return storage.acquire(debit)


_Remember = Callable[[Debit, Decision], None]


def _after(remember: _Remember) -> Callable[[_Call, Any], None]:
    """What the driver tells ``remember`` of each step: the storage's decisions (a refund
    or a charge decides nothing)."""

    def remembered(call: _Call, result: Any) -> None:
        if call[0] != "refund" and call[0] != "charge":
            remember(call[1], result)

    return remembered


# The sources of decisions whose debit was not made in the storage: the local fallback's
# (given back there), the fail modes' (nothing was debited).
_NOT_STORED = ("fallback", "fail_open", "fail_closed")

# The errors of a storage call that a flow is told of (it decides: the fail mode).
STORAGE_ERRORS = (StorageError,)


# What Limiter.refund and AsyncLimiter.refund are told when a refund was queued.
QUEUED: Final = "queued"


class Operations:
    """The limiter's operations, one body for sync and async storages: each returns its
    value, or with an async storage an awaitable of it (graphql-core's awaitable-or-value),
    and :class:`Limiter` / :class:`AsyncLimiter` are thin entry points around them."""

    def __init__(self, core: Core) -> None:
        self.core = core

    def acquire(self, key: str, cost: float, quotas: Sequence[Quota], options: Acquire) -> Any:
        """Debit ``cost`` from ``quotas`` of ``key`` (``options``: the entry point's
        keywords, ``now`` and ``costs``, as given)."""
        now = costs = None
        if options:  # the common call gives neither
            now, costs = options.get("now"), options.get("costs")
        shared = _check_request(key, cost, quotas, costs)
        core = self.core
        tell = core.tell
        started = 0.0 if tell is None else time.perf_counter()
        if core.infallible and not shared:  # the embedded default: no flow, no breaker
            decision = core.decide(key, cost, quotas, now, costs)  # checked above
        else:  # one path for one quota or many, shared or not
            debit = _new(Debit, (key, cost, quotas, now, costs, None, None))
            decision = self.execute(
                lambda: Core.acquire_flow(debit, core.shard_denials),
                debit,
                None if shared else ("acquire", debit),
            )
            if decision.__class__ is not Decision:  # an awaitable: timed once it is in
                return decision if tell is None else self._timed_later(decision, started, tell)
        if tell is not None:
            tell(decision, time.perf_counter() - started)
        return decision

    @staticmethod
    async def _timed_later(
        pending: Awaitable[Decision], started: float, tell: Callable[[Decision, float], None]
    ) -> Decision:
        decision = await pending
        tell(decision, time.perf_counter() - started)
        return decision

    def refund(self, debit: Debit, decision: Decision | None) -> Any:
        """Give back ``debit`` (:func:`refund_of` ``decision``'s debit): None when there is
        nothing to do or it was done, :data:`QUEUED` when the refund was queued (the entry
        point wakes its applier), else an awaitable."""
        key, amount, quotas, now, amounts, _, _ = debit
        shared = _check_request(key, amount, quotas, amounts)
        if not (amount > 0 if amounts is None else any(amounts)):
            return None
        if shared:  # given back on the shard it was debited on
            debit = pinned_to_decision(debit, decision)
            quotas = debit.quotas
        core = self.core
        # None: a debit made in the storage now; else the refund goes where its debit was.
        if decision is not None and (not decision.allowed or decision.source in _NOT_STORED):
            core.refund_elsewhere(debit, decision)
            return None
        if core.infallible and not shared:  # the embedded default: no flow, no breaker
            core.give_back(debit)  # checked above
            return None
        if core.refunds is not None:  # applied off the response path
            each = (amount,) * len(quotas) if amounts is None else amounts
            tenant = cast("str", key)  # checked above: never the shared scope
            core.refunds.add(tenant, quotas, each, debit.at, now, debit.turn)
            return QUEUED
        return self.execute(lambda: Core.refund_flow(debit), debit)

    def charge(self, debit: Debit, decision: Decision | None) -> Any:
        """Debit ``debit`` more, whether it fits or not (the overage of ``decision``'s
        debit): None when there is nothing to do or it was done, else an awaitable. Made at
        once, through the breaker and the fail mode (``local``: in the fallback while the
        storage is down); never queued, so that the subject's next request sees it."""
        key, amount, quotas, _, amounts, _, _ = debit
        shared = _check_request(key, amount, quotas, amounts)
        if not (amount > 0 if amounts is None else any(amounts)) or not Core.charges(decision):
            return None
        if shared:  # charged on the shard its debit was made on
            debit = pinned_to_decision(debit, decision)
        core = self.core
        if core.infallible and not shared:  # the embedded default: no flow, no breaker
            core.storage.charge(debit)
            return None
        result = self.execute(lambda: Core.charge_flow(debit), debit)
        return result if is_pending(result) else None

    def peek(self, key: str, quotas: Sequence[Quota], now: int | None) -> Any:
        _check_request(key, 0.0, quotas)
        debit = Debit(key, 0.0, quotas, now)
        return self.execute(lambda: Core.peek_flow(debit), debit)

    def execute(
        self, flow_factory: Callable[[], _Flow], debit: Debit, call: _Call | None = None
    ) -> Any:
        """Run an operation's storage calls (``call`` alone, made at once, or the flow),
        through the breaker and the fail mode."""
        core = self.core
        if core.infallible:
            return drive(flow_factory(), core.run, STORAGE_ERRORS)
        if not core.breaker.allow():
            return core.substitute(flow_factory, debit)
        try:
            if call is None:
                result = drive(flow_factory(), core.run, STORAGE_ERRORS, core.after)
            else:  # a request of one storage call: made at once, no flow to drive
                result = _call(core.storage, call)
        except StorageError as error:
            core.failed(error)
            return core.substitute(flow_factory, debit)
        except BaseException:
            core.breaker.abandon()  # e.g. interrupted: no verdict on the storage
            raise
        if is_pending(result):
            return self._execute_later(result, flow_factory, debit, call)
        return self._answered(result, call)

    async def _execute_later(
        self,
        pending: Awaitable[Any],
        flow_factory: Callable[[], _Flow],
        debit: Debit,
        call: _Call | None,
    ) -> Any:
        """:meth:`execute` once the storage's answer is in (an async storage): written
        apart, not as a flow through the breaker, because this is the hot path of an async
        limiter (a generator and a closure per decision cost it 8 % of its throughput)."""
        core = self.core
        try:
            result = await pending
        except StorageError as error:
            core.failed(error)
            return core.substitute(flow_factory, debit)
        except BaseException:
            core.breaker.abandon()  # e.g. cancelled: no verdict on the storage
            raise
        return self._answered(result, call)

    def _answered(self, result: Any, call: _Call | None) -> Any:
        core = self.core
        if call is not None and core.remember_hook is not None:
            core.remember_hook(call[1], result)
        core.succeeded()
        return result

    def apply(self, refund: PendingRefund) -> Any:
        """Apply one waiting refund: its :data:`_Outcome` (or the part of it still to
        apply), or an awaitable of that."""
        core = self.core
        if not core.breaker.allow():
            return "retry"
        applied: list[bool] = []
        debit = Debit(
            refund.key,
            refund.amount,
            refund.quotas,
            refund.now,
            refund.per_quota,
            refund.at,
            refund.turn,
        )
        flow = Core.refund_flow(debit, applied)
        try:
            result = drive(flow, core.run, STORAGE_ERRORS)
        except StorageError as error:
            return core.refund_failed(error, refund, applied)
        except BaseException:
            core.breaker.abandon()
            raise
        if is_pending(result):
            return self._applied_later(result, refund, applied)
        core.succeeded()
        return "applied"

    async def _applied_later(
        self, pending: Awaitable[Any], refund: PendingRefund, applied: list[bool]
    ) -> _Outcome | PendingRefund:
        core = self.core
        try:
            await pending
        except StorageError as error:
            return core.refund_failed(error, refund, applied)
        except BaseException:
            core.breaker.abandon()
            raise
        core.succeeded()
        return "applied"


def _owner(cls: type, name: str) -> type | None:
    """The class of ``cls``'s MRO that defines ``name``."""
    return next((klass for klass in cls.__mro__ if name in vars(klass)), None)
