"""Lease sets in process memory: :class:`MemoryLeases`, bounded whatever the tenants."""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections import deque
from typing import TYPE_CHECKING

from quotaql.errors import ConfigError
from quotaql.storage.base import LeaseResult, check_count, check_release, check_renew, check_take
from quotaql.storage.keys import drop_stale, network_places, overflow_network, tenant_part

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

# A lease in a set: its id in a tenant's set; (tenant part, id) in an overflow set (a
# network's or a limit's), which tenants share (so that one tenant's lease id never stands
# for another's).
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
    (tenant, limit) gets no set of its own: its leases go to an **overflow** set shared by
    network, as :class:`~quotaql.storage.memory.MemoryStorage` shares its overflow
    states: a new address subject's to one set per limit for its IPv4 /24 or IPv6 /48 (at
    most ``max_networks`` of them, idle ones dropped to make room), any other new tenant's
    (and an address's whose network finds no room) to one last-resort set per limit name.
    So a flood of new tenants from one network runs at most ``maximum`` operations per
    limit in all, and gets ``limited_by`` refusals past it, while a new tenant of another
    network runs. Tenants that have a set keep it. A release, renew or count of a lease
    taken in an overflow set finds it there. :attr:`overflowing` is true while new tenants
    go to an overflow set, :attr:`overflowed` counts the takes made on one,
    :attr:`overflowed_shared` those made on a last-resort set. Long or non-ASCII tenant
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
        max_keys: most (tenant, limit) sets kept, besides the overflow sets.
        max_networks: most (network, limit) overflow sets kept, besides one last-resort
            set per limit name.

    Attributes:
        overflowing: the last new set found the table full of live sets and went to an
            overflow set (false again once a new set gets room of its own).
        overflowed: how many takes used an overflow set.
        overflowed_shared: how many of them used a last-resort set (one per limit name).
    """

    name = "memory"
    fallible = False

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = 100_000,
        max_networks: int = 10_000,
    ) -> None:
        if isinstance(max_keys, bool) or not isinstance(max_keys, int) or max_keys < 1:
            raise ConfigError(f"max_keys must be a positive integer, got {max_keys!r}")
        if isinstance(max_networks, bool) or not isinstance(max_networks, int) or max_networks < 1:
            raise ConfigError(f"max_networks must be a positive integer, got {max_networks!r}")
        self._clock = clock
        self._max_keys = max_keys
        self._max_networks = max_networks
        self._lock = threading.Lock()
        self._sets: dict[str, _LeaseSet] = {}
        # Every key of _sets once (each set knows its index); only _drop deletes from
        # _sets, so the two always hold the same keys.
        self._order: list[str] = []
        self._cursor = 0  # where in _order the next look starts
        # Sets a release emptied: the first candidates for room (checked again when used).
        self._emptied: list[str] = []
        self._overflow: dict[str, _LeaseSet] = {}  # limit name -> the last-resort set
        # (limit name, network) key -> the network's set; each key once in _network_order
        # (only _make_network_room deletes from it).
        self._networks: dict[str, _LeaseSet] = {}
        self._network_order: deque[str] = deque()
        self._takes = 0
        self._full_at: int | None = None  # when _make_room last found nothing to drop
        self._networks_full_at: int | None = None  # when _make_network_room last did
        self.overflowing = False
        self.overflowed = 0
        self.overflowed_shared = 0
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
        return len(self._sets) + len(self._overflow) + len(self._networks)

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
            overflowed: list[int] = []  # the indexes of the specs without room
            for k in keys:
                found = sets.get(k)
                if found is not None:
                    targets.append((sets, k, found, lease))
                elif free > 0:
                    free -= 1
                    targets.append((sets, k, None, lease))
                    self.overflowing = False
                else:
                    overflowed.append(len(targets))
                    targets.append((sets, k, None, lease))  # replaced below
            if overflowed:
                names = [specs[i].name for i in overflowed]
                shared = self._overflow_targets(key, names, now)
                for i, (table, k) in zip(overflowed, shared, strict=True):
                    targets[i] = (table, k, table.get(k), (part, lease))
                self.overflowing = True
                self.overflowed += 1
                if any(table is self._overflow for table, _ in shared):
                    self.overflowed_shared += 1
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
                        if table is self._networks:
                            self._network_order.append(k)
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
        network = overflow_network(key)
        held = 0
        with self._lock:
            for name in names:
                k = name + part
                holder = self._holder(k, name, part, network, lease)
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
        network = overflow_network(key)
        expiry = now + ttl_ms
        renewed = 0
        with self._lock:
            for name in names:
                # The tenant's set, and the overflow ones (where a lease taken while the
                # table was full lives): expired leases dropped first, as the script does.
                own = self._sets.get(name + part)
                mine = _NO_MEMBERS if own is None else own.live(now)
                ours = None if network is None else self._networks.get(_network_key(name, network))
                others = [
                    (found, found.live(now))
                    for found in (ours, self._overflow.get(name))
                    if found is not None
                ]
                for lease in leases:
                    if own is not None and lease in mine:
                        own.put(lease, expiry)
                    else:
                        member = (part, lease)
                        holder = next((found for found, held in others if member in held), None)
                        if holder is None:
                            continue
                        holder.put(member, expiry)
                    renewed += 1
        return renewed

    def count(self, key: Tenant, name: str, now: Now = None) -> int:
        """The overflow set's count for a tenant without a set while the table is full."""
        name = check_count(name, now)
        if now is None:
            now = int(self._clock() * 1000)
        k = name + tenant_part(key)
        network = overflow_network(key)
        with self._lock:
            found = self._sets.get(k)
            if found is None and len(self._sets) >= self._max_keys:
                # The overflow set a take would use now: its network's, else the last resort.
                shared = None if network is None else _network_key(name, network)
                if shared is not None and shared in self._networks:
                    found = self._networks[shared]
                elif shared is None or len(self._networks) >= self._max_networks:
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
            self._networks.clear()
            self._network_order.clear()
            self._full_at = self._networks_full_at = None
            self.overflowing = False

    # -- the table -----------------------------------------------------------------------

    def _holder(
        self, k: str, name: str, part: str, network: str | None, lease: str
    ) -> tuple[_LeaseSet, _Member] | None:
        """The set that has ``lease`` (live or not), the tenant's else an overflow one (its
        network's, the limit's last resort), and the lease's member id there."""
        found = self._sets.get(k)
        if found is not None and lease in found.members:
            return found, lease
        member = (part, lease)
        if network is not None:
            shared = self._networks.get(_network_key(name, network))
            if shared is not None and member in shared.members:
                return shared, member
        shared = self._overflow.get(name)
        if shared is not None and member in shared.members:
            return shared, member
        return None

    def _overflow_targets(
        self, key: Tenant, names: Sequence[str], now: int
    ) -> list[tuple[dict[str, _LeaseSet], str]]:
        """Where the leases of the limits ``names`` of a new ``key`` go while the table is
        full: its network's set for an address subject while there is room for it among
        ``max_networks`` (idle ones make room), else the limit's last-resort set."""
        network = overflow_network(key)
        if network is None:
            return [(self._overflow, name) for name in names]
        networks = self._networks
        keys = [_network_key(name, network) for name in names]
        free = self._max_networks - len(networks)
        needed = sum(k not in networks for k in keys)
        while free < needed and self._make_network_room(now):
            free += 1
        return network_places(keys, names, networks, self._overflow, free)

    def _make_network_room(self, now: int) -> bool:
        """Drop one idle network set, looking at a few; False if all of them still count."""
        if now == self._networks_full_at:
            return False
        if drop_stale(self._networks, self._network_order, lambda s: s.idle(now), _ROOM_BATCH):
            return True
        self._networks_full_at = now
        return False

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


def _network_key(name: str, network: str) -> str:
    """The key of the overflow set of the limit ``name`` for a network's new tenants (limit
    names hold no control character: none spells another's)."""
    return f"{name}\4{network}"


# Every MemoryLeases, for a forked child: a lock another thread held at fork stays held in
# the child, whose every call would then wait for it forever.
_memories: weakref.WeakSet[MemoryLeases] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for memory in list(_memories):
        memory._forked()


os.register_at_fork(after_in_child=_after_fork_in_child)
