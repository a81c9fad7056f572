"""What a storage provides: every contract (rates and leases), its capabilities, the checks."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol, TypeAlias, TypeGuard, TypeVar, runtime_checkable

from quotaql.errors import ConfigError
from quotaql.policy.quota import _NAME, Decision, Quota

__all__ = [
    "MAX_LEASE_ID",
    "MAX_TTL_MS",
    "AsyncLeases",
    "AsyncStorage",
    "Debit",
    "LeaseResult",
    "LeaseSpec",
    "LeaseStore",
    "LeaseSupport",
    "Leases",
    "Now",
    "RateStorage",
    "Storage",
    "Tenant",
    "check_arguments",
    "check_count",
    "check_lease",
    "check_names",
    "check_release",
    "check_renew",
    "check_take",
    "check_ttl",
    "is_fallible",
    "is_pipelined",
    "supports_leases",
]

#: A tenant's key; None is the shared, platform-wide scope (of the quotas with
#: ``shared=True``, and of one lease set per limit).
Tenant: TypeAlias = str | None
#: Integer milliseconds that override a store's clock (tests); None: its own clock.
Now: TypeAlias = int | None

MAX_TTL_MS = 86_400_000  # a day: a lease that long is a leak, not an operation
MAX_LEASE_ID = 200  # characters

# -- rates -----------------------------------------------------------------------------------


class Debit(NamedTuple):
    """One debit of a tenant's quotas, or the refund or charge of one: what a storage's
    ``acquire``, ``refund`` and ``charge`` are given.

    Example:
        >>> from quotaql import Quota
        >>> Debit("acme", 30, [Quota("tenant", capacity=100, refill_per_second=1)]).amount
        30

    Attributes:
        key: the tenant; ``None`` is the shared scope of quotas with ``shared=True``.
        amount: what every quota is debited (given back, charged): a finite number >= 0.
        quotas: the quotas, all debited or none.
        now: integer milliseconds that override the storage's clock (tests); None: its clock.
        amounts: what each quota is asked for instead of ``amount``, one per quota (a root
            field's quota pays that field's cost); None: ``amount`` for all.
        at: for a refund, when the debit it gives back was made (its ``Decision.at``, in the
            storage's clock; None: now): a window gives back only to the window that debit
            was counted in.
        turn: for a refund, the turn that debit reserved (ms, ``at`` plus
            ``Decision.delay``; None: it did not wait): one waiter of that turn leaves the
            line of each quota with ``max_queued``.
    """

    key: Tenant
    amount: float
    quotas: Sequence[Quota]
    now: Now = None
    amounts: Sequence[float] | None = None
    at: int | None = None
    turn: int | None = None


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


_Decided_co = TypeVar("_Decided_co", covariant=True)  # a Decision, or an awaitable of one
_Done_co = TypeVar("_Done_co", covariant=True)  # None, or an awaitable of None


class RateStorage(Protocol[_Decided_co, _Done_co]):
    """Quota state: one contract in two colours, :data:`Storage` (its calls answer) and
    :data:`AsyncStorage` (its calls are awaited).

    ``now`` (integer milliseconds) overrides the storage's clock, for tests. Failures of the
    backend raise :class:`quotaql.errors.StorageError`.

    Attributes:
        name: the backend's name, in metrics and logs (``memory``, ``redis``).
        fallible: its calls can fail (a server); False for state in process memory, which
            the limiter calls without a circuit breaker, fail mode or refund queue.
        pipelined: its calls of one event loop go out in batches; ``pipeline`` then has
            the loop's counts of ``batches`` and ``commands`` (metrics read them).
    """

    name: str
    fallible: bool
    pipelined: bool

    def acquire(self, debit: Debit) -> _Decided_co:
        """Debit every quota of ``debit.key`` its amount if all allow it; else debit nothing."""
        ...

    def refund(self, debit: Debit) -> _Done_co:
        """Give every quota of ``debit.key`` its amount back (never above full), for the
        debit made at ``debit.at`` that reserved ``debit.turn`` (see :class:`Debit`)."""
        ...

    def charge(self, debit: Debit) -> _Done_co:
        """Debit every quota of ``debit.key`` its amount whether it fits or not (an
        operation's overage, another region's admissions): a bucket goes below empty, a
        window's count above its limit, and the key waits until that has passed."""
        ...

    def peek(self, key: Tenant, quotas: Sequence[Quota], now: Now = None) -> _Decided_co:
        """Each quota's state for ``key``, without debiting anything."""
        ...


#: Quota state behind a synchronous API (:class:`~quotaql.storage.memory.MemoryStorage`,
#: :class:`~quotaql.storage.redis.RedisStorage`).
Storage: TypeAlias = RateStorage[Decision, None]
#: :data:`Storage` for asyncio (:class:`~quotaql.storage.redis.AsyncRedisStorage`).
AsyncStorage: TypeAlias = RateStorage[Awaitable[Decision], Awaitable[None]]


# -- leases ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LeaseSpec:
    """One concurrency limit of a take: its name and how many leases its set may hold.

    Example:
        >>> LeaseSpec("tier", 4)
        LeaseSpec(name='tier', maximum=4)

    Attributes:
        name: the limit's name, as quota names (``[A-Za-z0-9_.:@/+=-]``, 1-128 characters):
            ``tier``, ``field:Query.search``, ``subscriptions``.
        maximum: leases the set may hold at once (an integer >= 1).
    """

    name: str
    maximum: int

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ConfigError(
                f"limit name {self.name!r} must be 1-128 characters of A-Z a-z 0-9 _ . : @ / + = -"
            )
        if type(self.maximum) is not int or self.maximum < 1:
            raise ConfigError(
                f"limit {self.name!r}: maximum must be an integer >= 1, got {self.maximum!r}"
            )


class LeaseResult(NamedTuple):
    """What a take answered.

    Attributes:
        taken: the lease is now held in every set of the take.
        limited_by: the name of the first limit at its maximum (None when taken).
        in_flight: the live leases of each set, in the order of the specs: after taking,
            or at the refusal (without this lease).
        next_free_ms: ms until the earliest lease of the refusing set expires (None when
            taken): the longest a slot can stay taken without a renewal, to cap a
            ``Retry-After``; a release may free one sooner.
        at: the storage's clock at the decision, in ms.
    """

    taken: bool
    limited_by: str | None
    in_flight: tuple[int, ...]
    next_free_ms: int | None
    at: int


_Taken_co = TypeVar("_Taken_co", covariant=True)  # a LeaseResult, or an awaitable of one
_Count_co = TypeVar("_Count_co", covariant=True)  # an int, or an awaitable of one


class LeaseStore(Protocol[_Taken_co, _Count_co]):
    """Lease sets: one contract in two colours, :data:`Leases` (its calls answer) and
    :data:`AsyncLeases` (its calls are awaited).

    A concurrency limit (``max_in_flight`` of a tier, of a root field, of subscriptions) is
    a **lease set** per (tenant, limit name): each operation that runs holds a lease in it,
    identified by a lease id, until it ends. A lease expires ``ttl_ms`` after it was taken
    or last renewed, so a worker that crashes (and stops renewing) never keeps a slot: its
    leases free themselves within their ttl. Every implementation decides exactly alike,
    all or nothing per call.

    ``key`` is the tenant (``None``: one platform-wide set per limit). ``now`` (integer ms of
    the store's clock) is for tests, as in the rate storages. Every call of a store that can
    fail may raise :class:`~quotaql.errors.StorageError`; after one from ``take``, the lease
    may or may not have been taken (the call may have run): release it, or let it expire.

    Attributes:
        name: the backend's name, in metrics and logs.
        fallible: its calls can fail (a server); False for sets in process memory.
    """

    name: str
    fallible: bool

    def take(
        self, key: Tenant, specs: Sequence[LeaseSpec], lease: str, ttl_ms: int, now: Now = None
    ) -> _Taken_co:
        """Put ``lease`` in the set of every spec if none is at its maximum (without this
        lease in it); else in none. Expired leases are dropped first. Taking a lease already
        held in a set does not count it twice (a retry after a timeout is safe); it only
        moves its expiry, never back."""
        ...

    def release(self, key: Tenant, names: Sequence[str], lease: str, now: Now = None) -> _Count_co:
        """Take ``lease`` out of the sets of ``names``: in how many it was still live (fewer
        than ``len(names)``: it had expired meanwhile)."""
        ...

    def renew(
        self, key: Tenant, names: Sequence[str], leases: Sequence[str], ttl_ms: int, now: Now = None
    ) -> _Count_co:
        """Push the expiry of the live ``leases`` of these sets to ``now + ttl_ms`` (never
        earlier than it was): how many (set, lease) pairs were live and renewed. A released
        or expired lease is never brought back."""
        ...

    def count(self, key: Tenant, name: str, now: Now = None) -> _Count_co:
        """The live leases of the set of ``name``."""
        ...


#: Lease sets behind a synchronous API (:class:`~quotaql.storage.memory_leases.MemoryLeases`,
#: :class:`~quotaql.storage.redis_leases.RedisLeases`).
Leases: TypeAlias = LeaseStore[LeaseResult, int]
#: :data:`Leases` for asyncio (:class:`~quotaql.storage.redis_leases.AsyncRedisLeases`).
AsyncLeases: TypeAlias = LeaseStore[Awaitable[LeaseResult], Awaitable[int]]


@runtime_checkable
class LeaseSupport(Protocol):
    """A rate storage that keeps lease sets too, on its own backend (a capability)."""

    def leases(self) -> Leases | AsyncLeases:
        """A new lease store on this storage's backend, of its colour (sync or async)."""
        ...


# -- capabilities ----------------------------------------------------------------------------


def is_fallible(store: object) -> bool:
    """Whether the calls of ``store`` (a rate storage or a lease store) can fail: its
    ``fallible``; a store that does not say is taken to be able to."""
    return bool(getattr(store, "fallible", True))


def is_pipelined(storage: object) -> bool:
    """Whether ``storage`` sends its calls in batches (its ``pipelined``; False if it does
    not say): its ``pipeline`` counts them."""
    return bool(getattr(storage, "pipelined", False))


def supports_leases(storage: object) -> TypeGuard[LeaseSupport]:
    """Whether ``storage`` keeps lease sets too: its ``leases()`` makes a store of them."""
    return isinstance(storage, LeaseSupport)


# -- lease arguments -------------------------------------------------------------------------


def check_take(specs: Sequence[LeaseSpec], lease: str, ttl_ms: int, now: int | None) -> None:
    """Refuse a take's arguments that are not valid (every store checks them alike)."""
    _check_specs(specs)
    check_lease(lease)
    check_ttl(ttl_ms)
    _check_now(now)


def check_release(names: Sequence[str], lease: str, now: int | None) -> tuple[str, ...]:
    """A release's limit names, its arguments checked."""
    names = check_names(names)
    check_lease(lease)
    _check_now(now)
    return names


def check_renew(
    names: Sequence[str], leases: Sequence[str], ttl_ms: int, now: int | None
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A renewal's limit names and lease ids (each once, in order), its arguments checked."""
    names = check_names(names)
    leases = _check_leases(leases)
    check_ttl(ttl_ms)
    _check_now(now)
    return names, leases


def check_count(name: str, now: int | None) -> str:
    """A count's limit name, its arguments checked."""
    (name,) = check_names((name,))
    _check_now(now)
    return name


def check_names(names: Sequence[str]) -> tuple[str, ...]:
    """The limit names, checked (at least one, each valid, each once)."""
    if isinstance(names, str):  # a name would read as a sequence of one-letter names
        raise TypeError(f"names must be a sequence of limit names, not the string {names!r}")
    names = tuple(names)
    if not names:
        raise ValueError("at least one limit name is needed")
    for name in names:
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ValueError(
                f"limit name {name!r} must be 1-128 characters of A-Z a-z 0-9 _ . : @ / + = -"
            )
    if len(names) > 1 and len(set(names)) != len(names):
        raise ValueError(f"limit names must be distinct, got {list(names)}")
    return names


def check_lease(lease: str) -> None:
    """Refuse a lease id that is not 1-:data:`MAX_LEASE_ID` characters of valid unicode."""
    if type(lease) is not str:
        raise TypeError(f"a lease id must be a string, got {type(lease).__name__}")
    if not 0 < len(lease) <= MAX_LEASE_ID:
        raise ValueError(f"a lease id must have 1-{MAX_LEASE_ID} characters, got {len(lease)}")
    if not lease.isascii():
        try:
            lease.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: Redis could not store it
            raise ValueError(f"a lease id must be valid unicode, got {lease!r}") from None


def check_ttl(ttl_ms: int) -> None:
    """Refuse a ttl that is not an integer from 1 to :data:`MAX_TTL_MS`."""
    if type(ttl_ms) is not int or not 0 < ttl_ms <= MAX_TTL_MS:
        raise ValueError(f"ttl_ms must be an integer from 1 to {MAX_TTL_MS}, got {ttl_ms!r}")


def _check_specs(specs: Sequence[LeaseSpec]) -> None:
    if not specs:
        raise ValueError("take needs at least one LeaseSpec")
    for spec in specs:
        if type(spec) is not LeaseSpec:
            raise TypeError(f"specs must be LeaseSpec objects, got {type(spec).__name__}")
    if len(specs) > 1 and len({spec.name for spec in specs}) != len(specs):
        raise ValueError(f"limit names must be distinct, got {[spec.name for spec in specs]}")


def _check_leases(leases: Sequence[str]) -> tuple[str, ...]:
    if isinstance(leases, str):
        raise TypeError(f"leases must be a sequence of lease ids, not the string {leases!r}")
    for lease in leases:
        check_lease(lease)
    return tuple(dict.fromkeys(leases))  # each once, in order


def _check_now(now: int | None) -> None:
    if now is not None and type(now) is not int:
        raise TypeError(f"now must be integer milliseconds or None, got {now!r}")
