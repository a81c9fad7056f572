"""Concurrency limits: leases on a tenant's slots, in process memory or in Redis.

A limit (``max_in_flight`` of a tier, of a root field, of subscriptions) is a **lease set**
per (tenant, limit name): each operation that runs holds a lease in it, identified by a
lease id, until it ends. A lease expires ``ttl_ms`` after it was taken or last renewed, so
a worker that crashes (and stops renewing) never keeps a slot: its leases free themselves
within their ttl. Three implementations decide exactly alike:

- :class:`MemoryLeases`: a dict in process memory, bounded in sets (see its docstring).
- :class:`RedisLeases` and :class:`AsyncRedisLeases`: a ZSET per set in Redis or Redis
  Cluster, ``<prefix>:{t:<tenant>}:~c:<limit>`` (the tenant's hash tag: its rate quotas
  and its lease sets share one slot), member = lease id, score = expiry in ms of the Redis
  clock (``TIME``); one call of ``lua/leases.lua`` per operation, through the storage's
  :meth:`~quotaql.storage.redis.RedisStorage.evaluate` (``NOSCRIPT``, error mapping to
  :class:`~quotaql.errors.StorageError`, the async deadline). Each key's TTL is raised to
  the longest ttl given to it, never lowered: an idle tenant's sets disappear.

The operations, all or nothing per call:

- ``take(key, specs, lease, ttl_ms)``: over several limits at once (a tier's and a root
  field's): drop the expired leases, refuse if any set is at its maximum (without this
  lease in it), else put the lease in every set. Taking a lease already held in a set does
  not count it twice (a retry after a timeout is safe); it only moves its expiry, never back.
- ``release(key, names, lease)``: take it out; returns in how many sets it was still live
  (fewer than ``len(names)``: it had expired meanwhile: count it).
- ``renew(key, names, leases, ttl_ms)``: push the expiry of live leases to ``now + ttl``
  (never earlier than it was): a released or expired lease is never brought back.
- ``count(key, name)``: the live leases of one set.

``key`` is the tenant (``None``: one platform-wide set per limit). ``now`` (integer ms of
the storage's clock) is for tests, as in the rate storages. Every call of a Redis
implementation may raise :class:`~quotaql.errors.StorageError`; after one from ``take``, the
lease may or may not have been taken (the script may have run): release it, or let it
expire.

:class:`LeaseKeeper` renews the leases a process holds, every ``ttl / 3``; :func:`new_lease_id`
makes lease ids unique across processes (forked ones included).
"""

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
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from quotaql.errors import ConfigError
from quotaql.policy.quota import _NAME
from quotaql.storage.memory import tenant_part
from quotaql.storage.redis import AsyncRedisStorage, RedisStorage, _key_base

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Iterable, Sequence

__all__ = [
    "AsyncLeases",
    "AsyncRedisLeases",
    "LeaseKeeper",
    "LeaseResult",
    "LeaseSpec",
    "Leases",
    "MemoryLeases",
    "RedisLeases",
    "lease_key",
    "lease_script_source",
    "new_lease_id",
]

MAX_TTL_MS = 86_400_000  # a day: a lease that long is a leak, not an operation
MAX_LEASE_ID = 200  # characters
RENEW_BATCH = 500  # leases per renew call of the keeper (a call is atomic: keep it short)
# Every 256 takes, look at this many sets (the longest unvisited first) for one to drop.
_SWEEP_MASK = 255
_SWEEP_BATCH = 64
# A new set in a full table: look at this many sets for one to drop (and after a miss, not
# again in the same millisecond: nothing expires until the clock moves).
_ROOM_BATCH = 8
_EMPTIED_MAX = 1024  # sets a release emptied, remembered as candidates for room
_NEVER = 2**63


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


class Leases(Protocol):
    """Lease sets behind a synchronous API (:class:`MemoryLeases`, :class:`RedisLeases`)."""

    def take(
        self,
        key: str | None,
        specs: Sequence[LeaseSpec],
        lease: str,
        ttl_ms: int,
        now: int | None = None,
    ) -> LeaseResult:
        """Put ``lease`` in the set of every spec if none is full; else in none."""
        ...

    def release(
        self, key: str | None, names: Sequence[str], lease: str, now: int | None = None
    ) -> int:
        """Take ``lease`` out of these sets; how many held it live."""
        ...

    def renew(
        self,
        key: str | None,
        names: Sequence[str],
        leases: Sequence[str],
        ttl_ms: int,
        now: int | None = None,
    ) -> int:
        """Push the expiry of the live ``leases`` of these sets; how many (set, lease) pairs."""
        ...

    def count(self, key: str | None, name: str, now: int | None = None) -> int:
        """The live leases of one set."""
        ...


class AsyncLeases(Protocol):
    """:class:`Leases` for asyncio (:class:`AsyncRedisLeases`)."""

    async def take(
        self,
        key: str | None,
        specs: Sequence[LeaseSpec],
        lease: str,
        ttl_ms: int,
        now: int | None = None,
    ) -> LeaseResult:
        """Put ``lease`` in the set of every spec if none is full; else in none."""
        ...

    async def release(
        self, key: str | None, names: Sequence[str], lease: str, now: int | None = None
    ) -> int:
        """Take ``lease`` out of these sets; how many held it live."""
        ...

    async def renew(
        self,
        key: str | None,
        names: Sequence[str],
        leases: Sequence[str],
        ttl_ms: int,
        now: int | None = None,
    ) -> int:
        """Push the expiry of the live ``leases`` of these sets; how many (set, lease) pairs."""
        ...

    async def count(self, key: str | None, name: str, now: int | None = None) -> int:
        """The live leases of one set."""
        ...


# -- arguments -------------------------------------------------------------------------------


def _check_specs(specs: Sequence[LeaseSpec]) -> None:
    if not specs:
        raise ValueError("take needs at least one LeaseSpec")
    for spec in specs:
        if type(spec) is not LeaseSpec:
            raise TypeError(f"specs must be LeaseSpec objects, got {type(spec).__name__}")
    if len(specs) > 1 and len({spec.name for spec in specs}) != len(specs):
        raise ValueError(f"limit names must be distinct, got {[spec.name for spec in specs]}")


def _check_names(names: Sequence[str]) -> tuple[str, ...]:
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


def _check_lease(lease: str) -> None:
    if type(lease) is not str:
        raise TypeError(f"a lease id must be a string, got {type(lease).__name__}")
    if not 0 < len(lease) <= MAX_LEASE_ID:
        raise ValueError(f"a lease id must have 1-{MAX_LEASE_ID} characters, got {len(lease)}")
    if not lease.isascii():
        try:
            lease.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: Redis could not store it
            raise ValueError(f"a lease id must be valid unicode, got {lease!r}") from None


def _check_leases(leases: Sequence[str]) -> tuple[str, ...]:
    if isinstance(leases, str):
        raise TypeError(f"leases must be a sequence of lease ids, not the string {leases!r}")
    for lease in leases:
        _check_lease(lease)
    return tuple(dict.fromkeys(leases))  # each once, in order


def _check_ttl(ttl_ms: int) -> None:
    if type(ttl_ms) is not int or not 0 < ttl_ms <= MAX_TTL_MS:
        raise ValueError(f"ttl_ms must be an integer from 1 to {MAX_TTL_MS}, got {ttl_ms!r}")


def _check_now(now: int | None) -> None:
    if now is not None and type(now) is not int:
        raise TypeError(f"now must be integer milliseconds or None, got {now!r}")


# -- memory ----------------------------------------------------------------------------------


# A lease in a set: its id in a tenant's set; (tenant part, id) in an overflow set, which
# tenants share (so that one tenant's lease id never stands for another's).
_Member = str | tuple[str, str]


class _LeaseSet:
    """One lease set in memory: lease id -> expiry ms, and when the last of them expires."""

    __slots__ = ("expires", "index", "members", "soonest")

    def __init__(self, index: int = -1) -> None:
        self.index = index  # its place in MemoryLeases._order (-1: an overflow set)
        self.members: dict[_Member, int] = {}
        self.expires = 0  # raised, never lowered, as the Redis key's TTL
        self.soonest = _NEVER  # no member expires before this (a lower bound)

    def live(self, now: int) -> dict[_Member, int]:
        """The members, expired ones dropped first."""
        members = self.members
        if self.soonest <= now:
            if self.expires <= now:
                members.clear()
            else:
                for lease in [lease for lease, expiry in members.items() if expiry <= now]:
                    del members[lease]
            self.soonest = min(members.values(), default=_NEVER)
        return members

    def put(self, lease: _Member, expiry: int) -> None:
        """Hold ``lease`` until ``expiry`` at least (``ZADD GT``)."""
        members = self.members
        if members.get(lease, 0) < expiry:
            members[lease] = expiry
        self.soonest = min(self.soonest, expiry)
        self.expires = max(self.expires, expiry)

    def idle(self, now: int) -> bool:
        """Nothing in it still counts: it may be dropped."""
        return not self.members or self.expires <= now


_NO_MEMBERS: dict[_Member, int] = {}


class MemoryLeases:
    """Lease sets in a dict, for one process (thread-safe: one lock, never held across I/O).

    Bounded whatever the tenants: at most ``max_keys`` (tenant, limit) sets. Only sets that
    no longer count (empty, or all their leases expired) are dropped to make room, so a
    flood of new tenants never frees a busy tenant's slots. While every set is live, a new
    (tenant, limit) gets no set of its own: its leases go to one **overflow** set per limit
    name, shared by every tenant in that case, so a flood of new tenants runs at most
    ``maximum`` operations per limit in all, and gets ``limited_by`` refusals past it.
    Tenants that have a set keep it. A release, renew or count of a lease taken in the
    overflow set finds it there. :attr:`overflowing` is true while new tenants go to an
    overflow set, :attr:`overflowed` counts the takes made on one. Long or non-ASCII tenant
    keys are stored as their digest, as :class:`~quotaql.storage.memory.MemoryStorage` does.

    Each process has its own sets: limits in memory are per process (Redis shares them).
    A forked child starts with a copy of the parent's sets and a lock of its own.

    Example:
        >>> leases = MemoryLeases(clock=lambda: 0.0)
        >>> tier = LeaseSpec("tier", maximum=1)
        >>> leases.take("acme", [tier], "op-1", ttl_ms=30_000).taken
        True
        >>> leases.take("acme", [tier], "op-2", ttl_ms=30_000)
        LeaseResult(taken=False, limited_by='tier', in_flight=(1,), next_free_ms=30000, at=0)
        >>> leases.release("acme", ["tier"], "op-1")
        1
        >>> leases.take("acme", [tier], "op-2", ttl_ms=30_000).in_flight
        (1,)

    Args:
        clock: seconds from a monotonic clock (``time.monotonic`` by default); tests inject
            their own.
        max_keys: most (tenant, limit) sets kept, besides one overflow set per limit name.

    Attributes:
        overflowing: the last new set found the table full of live sets and went to the
            overflow set (false again once a new set gets room of its own).
        overflowed: how many takes used an overflow set.
    """

    name = "memory"

    def __init__(
        self, *, clock: Callable[[], float] = time.monotonic, max_keys: int = 100_000
    ) -> None:
        if isinstance(max_keys, bool) or not isinstance(max_keys, int) or max_keys < 1:
            raise ConfigError(f"max_keys must be a positive integer, got {max_keys!r}")
        self._clock = clock
        self._max_keys = max_keys
        self._lock = threading.Lock()
        self._sets: dict[str, _LeaseSet] = {}
        # Every key of _sets once (each set knows its index); only _drop deletes from
        # _sets, so the two always hold the same keys.
        self._order: list[str] = []
        self._cursor = 0  # where in _order the next look starts
        # Sets a release emptied: the first candidates for room (checked again when used).
        self._emptied: list[str] = []
        self._overflow: dict[str, _LeaseSet] = {}  # limit name -> the shared set
        self._takes = 0
        self._full_at: int | None = None  # when _make_room last found nothing to drop
        self.overflowing = False
        self.overflowed = 0
        _memories.add(self)

    def _forked(self) -> None:
        """In a forked child: a fresh lock (another thread of the parent may have held it at
        the fork, and no thread of the child would ever release it)."""
        self._lock = threading.Lock()

    def now(self) -> int:
        """The storage clock in integer milliseconds."""
        return int(self._clock() * 1000)

    def __len__(self) -> int:
        """The sets held: the tenants' (idle ones until dropped) and the overflow ones."""
        return len(self._sets) + len(self._overflow)

    def take(
        self,
        key: str | None,
        specs: Sequence[LeaseSpec],
        lease: str,
        ttl_ms: int,
        now: int | None = None,
    ) -> LeaseResult:
        """Put ``lease`` in the set of every spec if none is at its maximum; else in none."""
        _check_specs(specs)
        _check_lease(lease)
        _check_ttl(ttl_ms)
        _check_now(now)
        if now is None:
            now = int(self._clock() * 1000)
        part = tenant_part(key)
        keys = [spec.name + part for spec in specs]
        sets = self._sets
        with self._lock:
            # Room for the new sets first: only idle sets are dropped, and one of them may
            # be a set of this very call, so the sets are looked up after.
            while self._max_keys - len(sets) < sum(k not in sets for k in keys):
                if not self._make_room(now):
                    break
            free = self._max_keys - len(sets)
            # Per spec: its table, its key there, its set (None: not made yet), the lease's
            # member id in it (in an overflow set, shared by tenants: the tenant's too).
            targets: list[tuple[dict[str, _LeaseSet], str, _LeaseSet | None, _Member]] = []
            overflowed = False
            for k, spec in zip(keys, specs, strict=True):
                found = sets.get(k)
                if found is not None:
                    targets.append((sets, k, found, lease))
                elif free > 0:
                    free -= 1
                    targets.append((sets, k, None, lease))
                    self.overflowing = False
                else:
                    shared = self._overflow.get(spec.name)
                    targets.append((self._overflow, spec.name, shared, (part, lease)))
                    overflowed = self.overflowing = True
            if overflowed:
                self.overflowed += 1
            counts: list[int] = []
            held: list[bool] = []
            for (_, _, found, member), spec in zip(targets, specs, strict=True):
                members = _NO_MEMBERS if found is None else found.live(now)
                holds = member in members
                counts.append(len(members))
                held.append(holds)
                if not holds and len(members) >= spec.maximum:  # refused: the first full set
                    counts.extend(
                        0 if rest is None else len(rest.live(now))
                        for _, _, rest, _ in targets[len(counts) :]
                    )
                    wait = min(members.values()) - now
                    return LeaseResult(False, spec.name, tuple(counts), wait, now)
            expiry = now + ttl_ms
            for i, (table, k, found, member) in enumerate(targets):
                target = found
                if target is None:
                    if table is sets:
                        target = table[k] = _LeaseSet(len(self._order))
                        self._order.append(k)
                    else:
                        target = table[k] = _LeaseSet()
                target.put(member, expiry)
                if not held[i]:
                    counts[i] += 1
            self._takes += 1
            if not self._takes & _SWEEP_MASK:
                self._sweep(now)
        return LeaseResult(True, None, tuple(counts), None, now)

    def release(
        self, key: str | None, names: Sequence[str], lease: str, now: int | None = None
    ) -> int:
        """Take ``lease`` out of the sets of ``names``: in how many it was still live."""
        names = _check_names(names)
        _check_lease(lease)
        _check_now(now)
        if now is None:
            now = int(self._clock() * 1000)
        part = tenant_part(key)
        held = 0
        with self._lock:
            for name in names:
                k = name + part
                holder = self._holder(k, name, part, lease)
                if holder is not None:
                    found, member = holder
                    if found.members.pop(member) > now:
                        held += 1
                    if not found.members and found.index >= 0 and len(self._emptied) < _EMPTIED_MAX:
                        self._emptied.append(k)
        return held

    def renew(
        self,
        key: str | None,
        names: Sequence[str],
        leases: Sequence[str],
        ttl_ms: int,
        now: int | None = None,
    ) -> int:
        """Push the expiry of the live ``leases`` of these sets to ``now + ttl_ms`` (never
        earlier): how many (set, lease) pairs were live and renewed."""
        names = _check_names(names)
        leases = _check_leases(leases)
        _check_ttl(ttl_ms)
        _check_now(now)
        if now is None:
            now = int(self._clock() * 1000)
        part = tenant_part(key)
        expiry = now + ttl_ms
        renewed = 0
        with self._lock:
            for name in names:
                # The tenant's set, and the overflow one (where a lease taken while the table
                # was full lives): expired leases dropped first, as the script does.
                own = self._sets.get(name + part)
                shared = self._overflow.get(name)
                mine = _NO_MEMBERS if own is None else own.live(now)
                theirs = _NO_MEMBERS if shared is None else shared.live(now)
                for lease in leases:
                    if own is not None and lease in mine:
                        own.put(lease, expiry)
                    elif shared is not None and (part, lease) in theirs:
                        shared.put((part, lease), expiry)
                    else:
                        continue
                    renewed += 1
        return renewed

    def count(self, key: str | None, name: str, now: int | None = None) -> int:
        """The live leases of the set of ``name`` (the overflow set's for a tenant without
        a set of its own while the table is full)."""
        (name,) = _check_names((name,))
        _check_now(now)
        if now is None:
            now = int(self._clock() * 1000)
        k = name + tenant_part(key)
        with self._lock:
            found = self._sets.get(k)
            if found is None and len(self._sets) >= self._max_keys:
                found = self._overflow.get(name)
            return 0 if found is None else len(found.live(now))

    def clear(self) -> None:
        """Forget every set."""
        with self._lock:
            self._sets.clear()
            self._order.clear()
            self._emptied.clear()
            self._cursor = 0
            self._overflow.clear()
            self._full_at = None
            self.overflowing = False

    # -- the table -----------------------------------------------------------------------

    def _holder(self, k: str, name: str, part: str, lease: str) -> tuple[_LeaseSet, _Member] | None:
        """The set that has ``lease`` (live or not), the tenant's else the overflow one,
        and the lease's member id there."""
        found = self._sets.get(k)
        if found is not None and lease in found.members:
            return found, lease
        shared = self._overflow.get(name)
        if shared is not None and (part, lease) in shared.members:
            return shared, (part, lease)
        return None

    def _make_room(self, now: int) -> bool:
        """Drop one idle set: one a release emptied, else one of a few looked at in turn;
        False if all of them still count."""
        emptied, sets = self._emptied, self._sets
        while emptied:
            k = emptied.pop()
            found = sets.get(k)
            if found is not None and found.idle(now):
                self._drop(k)
                return True
        if now == self._full_at:
            return False
        for _ in range(min(_ROOM_BATCH, len(self._order))):
            if self._look(now):
                return True
        self._full_at = now
        return False

    def _sweep(self, now: int) -> None:
        """Drop the idle sets among the next few (bounded work per call)."""
        for _ in range(min(_SWEEP_BATCH, len(self._order))):
            self._look(now)

    def _look(self, now: int) -> bool:
        """Look at the set under the cursor: drop it if idle (True), else move past it."""
        order = self._order
        i = self._cursor
        if i >= len(order):
            i = 0
        k = order[i]
        if self._sets[k].idle(now):
            self._drop(k)  # the last key takes its place: looked at next
            self._cursor = i
            return True
        self._cursor = i + 1
        return False

    def _drop(self, k: str) -> None:
        """Delete a tenant's set: the last key of ``_order`` takes its place (O(1))."""
        i = self._sets.pop(k).index
        order = self._order
        last = order.pop()
        if last != k:
            order[i] = last
            self._sets[last].index = i


# -- Redis -----------------------------------------------------------------------------------


@cache
def lease_script_source() -> str:
    """The Lua script of the lease sets (``lua/leases.lua``)."""
    folder = resources.files("quotaql.storage") / "lua"
    return folder.joinpath("leases.lua").read_text(encoding="utf-8")


def lease_key(prefix: str, tenant: str | None, name: str) -> str:
    """The Redis key of a lease set: ``<prefix>:{t:<tenant>}:~c:<name>`` (``~`` is in no
    quota name, so no lease set is a quota's state)."""
    return f"{_key_base(prefix, tenant)}~c:{name}"


def _when(now: int | None) -> str:
    _check_now(now)
    return "" if now is None else str(now)


def _take_request(
    prefix: str,
    tenant: str | None,
    specs: Sequence[LeaseSpec],
    lease: str,
    ttl_ms: int,
    now: int | None,
) -> tuple[list[str], list[str]]:
    _check_specs(specs)
    _check_lease(lease)
    _check_ttl(ttl_ms)
    base = _key_base(prefix, tenant) + "~c:"
    keys = [base + spec.name for spec in specs]
    return keys, ["take", _when(now), str(ttl_ms), lease, *(str(spec.maximum) for spec in specs)]


def _taken(raw: list[Any], specs: Sequence[LeaseSpec]) -> LeaseResult:
    at, refused, wait, *counts = raw
    if refused == 0:
        return LeaseResult(True, None, tuple(counts), None, at)
    return LeaseResult(False, specs[refused - 1].name, tuple(counts), wait, at)


def _release_request(
    prefix: str, tenant: str | None, names: Sequence[str], lease: str, now: int | None
) -> tuple[list[str], list[str]]:
    names = _check_names(names)
    _check_lease(lease)
    base = _key_base(prefix, tenant) + "~c:"
    return [base + name for name in names], ["release", _when(now), lease]


def _renew_request(
    prefix: str,
    tenant: str | None,
    names: Sequence[str],
    leases: Sequence[str],
    ttl_ms: int,
    now: int | None,
) -> tuple[list[str], list[str]] | None:
    """KEYS and ARGV of a renew, or None when there is nothing to renew."""
    names = _check_names(names)
    leases = _check_leases(leases)
    _check_ttl(ttl_ms)
    when = _when(now)
    if not leases:
        return None
    base = _key_base(prefix, tenant) + "~c:"
    return [base + name for name in names], ["renew", when, str(ttl_ms), *leases]


def _count_request(
    prefix: str, tenant: str | None, name: str, now: int | None
) -> tuple[list[str], list[str]]:
    (name,) = _check_names((name,))
    return [lease_key(prefix, tenant, name)], ["count", _when(now)]


class RedisLeases:
    """Lease sets in Redis or Redis Cluster, through a :class:`RedisStorage` (its private
    client, its prefix, its timeout and error mapping): one ``EVALSHA`` per call.

    Args:
        storage: the storage whose connections and key prefix the leases use.
    """

    __slots__ = ("_script", "prefix", "storage")
    name = "redis"

    def __init__(self, storage: RedisStorage) -> None:
        if not isinstance(storage, RedisStorage):
            raise TypeError(f"RedisLeases needs a RedisStorage, got {type(storage).__name__}")
        self.storage = storage
        self.prefix = storage.prefix
        self._script = storage.client.register_script(lease_script_source())

    def take(
        self,
        key: str | None,
        specs: Sequence[LeaseSpec],
        lease: str,
        ttl_ms: int,
        now: int | None = None,
    ) -> LeaseResult:
        """Put ``lease`` in the set of every spec if none is at its maximum; else in none."""
        keys, args = _take_request(self.prefix, key, specs, lease, ttl_ms, now)
        return _taken(self.storage.evaluate(self._script, keys, args), specs)

    def release(
        self, key: str | None, names: Sequence[str], lease: str, now: int | None = None
    ) -> int:
        """Take ``lease`` out of the sets of ``names``: in how many it was still live."""
        keys, args = _release_request(self.prefix, key, names, lease, now)
        held: int = self.storage.evaluate(self._script, keys, args)[1]
        return held

    def renew(
        self,
        key: str | None,
        names: Sequence[str],
        leases: Sequence[str],
        ttl_ms: int,
        now: int | None = None,
    ) -> int:
        """Push the expiry of the live ``leases`` of these sets to ``now + ttl_ms`` (never
        earlier): how many (set, lease) pairs were live and renewed."""
        request = _renew_request(self.prefix, key, names, leases, ttl_ms, now)
        if request is None:
            return 0
        renewed: int = self.storage.evaluate(self._script, *request)[1]
        return renewed

    def count(self, key: str | None, name: str, now: int | None = None) -> int:
        """The live leases of the set of ``name``."""
        keys, args = _count_request(self.prefix, key, name, now)
        live: int = self.storage.evaluate(self._script, keys, args)[1]
        return live


class AsyncRedisLeases:
    """:class:`RedisLeases` for asyncio, through an :class:`AsyncRedisStorage` (its deadline
    bounds each call).

    Args:
        storage: the storage whose connections and key prefix the leases use.
    """

    __slots__ = ("_script", "prefix", "storage")
    name = "redis"

    def __init__(self, storage: AsyncRedisStorage) -> None:
        if not isinstance(storage, AsyncRedisStorage):
            raise TypeError(
                f"AsyncRedisLeases needs an AsyncRedisStorage, got {type(storage).__name__}"
            )
        self.storage = storage
        self.prefix = storage.prefix
        self._script = storage.client.register_script(lease_script_source())

    async def take(
        self,
        key: str | None,
        specs: Sequence[LeaseSpec],
        lease: str,
        ttl_ms: int,
        now: int | None = None,
    ) -> LeaseResult:
        """Put ``lease`` in the set of every spec if none is at its maximum; else in none."""
        keys, args = _take_request(self.prefix, key, specs, lease, ttl_ms, now)
        return _taken(await self.storage.evaluate(self._script, keys, args), specs)

    async def release(
        self, key: str | None, names: Sequence[str], lease: str, now: int | None = None
    ) -> int:
        """Take ``lease`` out of the sets of ``names``: in how many it was still live."""
        keys, args = _release_request(self.prefix, key, names, lease, now)
        held: int = (await self.storage.evaluate(self._script, keys, args))[1]
        return held

    async def renew(
        self,
        key: str | None,
        names: Sequence[str],
        leases: Sequence[str],
        ttl_ms: int,
        now: int | None = None,
    ) -> int:
        """Push the expiry of the live ``leases`` of these sets to ``now + ttl_ms`` (never
        earlier): how many (set, lease) pairs were live and renewed."""
        request = _renew_request(self.prefix, key, names, leases, ttl_ms, now)
        if request is None:
            return 0
        renewed: int = (await self.storage.evaluate(self._script, *request))[1]
        return renewed

    async def count(self, key: str | None, name: str, now: int | None = None) -> int:
        """The live leases of the set of ``name``."""
        keys, args = _count_request(self.prefix, key, name, now)
        live: int = (await self.storage.evaluate(self._script, keys, args))[1]
        return live


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


def _after_fork_in_child() -> None:
    global _ids
    _ids = _Ids()
    for keeper in list(_keepers):
        keeper._forked()
    for memory in list(_memories):
        memory._forked()


# -- the keeper ------------------------------------------------------------------------------

_Group = tuple[str | None, tuple[str, ...]]  # (tenant, limit names)


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
        leases: the lease sets (:class:`MemoryLeases`, :class:`RedisLeases`,
            :class:`AsyncRedisLeases`).
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
        _check_ttl(ttl_ms)
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
        group = (key, _check_names(names))
        _check_lease(lease)
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
        """The thread: a round every period until stopped (or forked away)."""
        renew: Callable[..., int] = self.leases.renew  # type: ignore[assignment]
        while not stop.wait(self.period_ms / 1000):
            for group, chunk in self._round(self._sync):
                if stop.is_set():
                    return
                try:
                    renewed = renew(group[0], group[1], chunk, self.ttl_ms)
                except Exception as exc:  # never stop renewing
                    self._failed(exc)
                else:
                    self._done(renewed, len(group[1]) * len(chunk))

    async def _run_async(self, loop: asyncio.AbstractEventLoop, state: _LoopState) -> None:
        """A loop's task: a round every period until cancelled (or forked away)."""
        renew: Callable[..., Coroutine[Any, Any, int]] = self.leases.renew  # type: ignore[assignment]
        me = asyncio.current_task()
        try:
            while True:
                await asyncio.sleep(self.period_ms / 1000)
                if self._loops.get(loop) is not state or state.task is not me:
                    return  # forked, or replaced
                for group, chunk in self._round(state):
                    try:
                        renewed = await renew(group[0], group[1], chunk, self.ttl_ms)
                    except Exception as exc:  # never stop renewing
                        self._failed(exc)
                    else:
                        self._done(renewed, len(group[1]) * len(chunk))
        finally:
            if state.task is me:  # the state no longer refers to the loop (a weak key)
                state.task = None

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


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


_keepers: weakref.WeakSet[LeaseKeeper] = weakref.WeakSet()
_memories: weakref.WeakSet[MemoryLeases] = weakref.WeakSet()
os.register_at_fork(after_in_child=_after_fork_in_child)
