"""Lease sets in process memory: :class:`MemoryLeases`, bounded whatever the tenants."""

from __future__ import annotations

import os
import threading
import time
import weakref
from typing import TYPE_CHECKING

from quotaql.errors import ConfigError
from quotaql.storage.base import LeaseResult, check_count, check_release, check_renew, check_take
from quotaql.storage.keys import tenant_part

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from quotaql.storage.base import LeaseSpec, Now, Tenant

__all__ = ["MemoryLeases"]

# Every 256 takes, look at this many sets (the longest unvisited first) for one to drop.
_SWEEP_MASK = 255
_SWEEP_BATCH = 64
# A new set in a full table: look at this many sets for one to drop (and after a miss, not
# again in the same millisecond: nothing expires until the clock moves).
_ROOM_BATCH = 8
_EMPTIED_MAX = 1024  # sets a release emptied, remembered as candidates for room
_NEVER = 2**63

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
        >>> from quotaql.storage import LeaseSpec
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
    fallible = False

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
        self, key: Tenant, specs: Sequence[LeaseSpec], lease: str, ttl_ms: int, now: Now = None
    ) -> LeaseResult:
        check_take(specs, lease, ttl_ms, now)
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

    def release(self, key: Tenant, names: Sequence[str], lease: str, now: Now = None) -> int:
        names = check_release(names, lease, now)
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
        self, key: Tenant, names: Sequence[str], leases: Sequence[str], ttl_ms: int, now: Now = None
    ) -> int:
        names, leases = check_renew(names, leases, ttl_ms, now)
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

    def count(self, key: Tenant, name: str, now: Now = None) -> int:
        """The overflow set's count for a tenant without a set while the table is full."""
        name = check_count(name, now)
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


# Every MemoryLeases, for a forked child: a lock another thread held at fork stays held in
# the child, whose every call would then wait for it forever.
_memories: weakref.WeakSet[MemoryLeases] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for memory in list(_memories):
        memory._forked()


os.register_at_fork(after_in_child=_after_fork_in_child)
