"""The embedded default storage: a dict in process memory around the policy functions."""

from __future__ import annotations

import os
import re
import threading
import time
import weakref
from collections import deque
from typing import TYPE_CHECKING, Any

from quotaql.errors import ConfigError
from quotaql.policy.algorithms import ALGORITHMS, CHARGES, Check, commit
from quotaql.policy.quota import Decision, Quota, Source, combine, decide_one
from quotaql.storage.base import Debit, check_arguments
from quotaql.storage.keys import (
    PLAIN_TENANT_MAX,
    drop_stale,
    network_places,
    overflow_network,
    tenant_part,
)
from quotaql.storage.memory_leases import MemoryLeases

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = ["MemoryStorage"]

# Every 256 writes, look at this many states (the longest unvisited first) for expiry.
_SWEEP_MASK = 255
_SWEEP_BATCH = 64
# A new key in a full table: look at this many states for an expired one to replace (and
# after a miss, not again in the same millisecond: nothing expires until the clock moves).
_ROOM_BATCH = 8
# A state equal to the empty one (a full bucket, an empty window): kept until swept.
_EMPTY: tuple[int, Any] = (0, None)
# A table of states: key -> (expires at ms, state).
_Table = dict[str, tuple[int, Any]]


class MemoryStorage:
    """Quota state in a dict, for one process: the embedded default.

    Thread-safe (one lock, held only while deciding, never across an ``await``, so it is
    also safe to call from asyncio code).

    Bounded in bytes, whatever the tenant keys:

    - A tenant key of more than 64 characters, or one that is not ASCII, is stored as
      128 bits of its SHA-256 (22 characters), so a bucket's state costs under 300 bytes
      however long the key (a window counter's some 80 more; a sliding log grows with its
      traffic). The tenant the caller passes and sees is unchanged.
    - The table holds at most ``max_keys`` (tenant, quota) states. Only states that no
      longer matter (a refilled bucket, an empty window: equal to a fresh one) are dropped
      to make room; a state below capacity is never evicted, so a flood of new keys cannot
      hand a drained tenant a full budget again.
    - While the table is full of live states, a new key gets no state of its own: its
      decisions are made on an overflow state shared **by network**: a new address subject
      (``ip:203.0.113.9``, ``ip:2001:db8:1:2::/64``: :func:`~quotaql.storage.keys.
      overflow_network`) shares one state per quota with its IPv4 /24 or IPv6 /48, so a
      flood from one network draws on that network's budget and a new client of another
      network runs on its own. Those network states are bounded too (``max_networks``,
      refilled ones dropped to make room); any other new key (an API key, a user), and an
      address whose network finds no room, shares the last resort: one state per quota
      (per name, algorithm and parameters). Keys that have a state keep it.
      :attr:`overflowing` is true while new keys go to an overflow state,
      :attr:`overflowed` counts the decisions made on one, :attr:`overflowed_shared`
      those among them made on a last-resort state. A refund or a peek of a key without a
      state of its own reads the overflow state it was debited on while the table is full.

    Example:
        >>> from quotaql import Quota
        >>> storage = MemoryStorage()
        >>> quota = Quota("tenant", capacity=100, refill_per_second=1)
        >>> storage.acquire(Debit("acme", 30, [quota])).remaining
        70.0
        >>> full = MemoryStorage(max_keys=1, clock=lambda: 0.0)
        >>> full.acquire(Debit("acme", 30, [quota])).remaining  # its own state
        70.0
        >>> full.acquire(Debit("new-1", 60, [quota])).remaining  # the overflow state
        40.0
        >>> full.acquire(Debit("new-2", 60, [quota])).allowed  # the same overflow state
        False
        >>> full.overflowing, full.overflowed
        (True, 2)
        >>> full.acquire(Debit("ip:203.0.113.9", 60, [quota])).remaining  # its /24's state
        40.0
        >>> full.acquire(Debit("ip:198.51.100.7", 60, [quota])).remaining  # another /24's
        40.0

    Args:
        clock: seconds from a monotonic clock (``time.monotonic`` by default); tests inject
            their own.
        max_keys: most (tenant, quota) states kept, besides the overflow states.
        max_networks: most (network, quota) overflow states kept, besides one last-resort
            state per quota.
        source: the ``Decision.source`` it reports (the limiter's local fallback uses
            ``"fallback"``).

    Attributes:
        overflowing: the last new key found the table full of live states and was decided
            on an overflow budget (false again once a new key gets a state of its own).
        overflowed: how many decisions were made on an overflow budget.
        overflowed_shared: how many of them were made on a last-resort state (one per
            quota: a new key that is no address, or an address whose network found no
            room among ``max_networks``).
    """

    name = "memory"
    fallible = False
    pipelined = False

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = 1_000_000,
        max_networks: int = 10_000,
        source: Source = "memory",
    ) -> None:
        if isinstance(max_keys, bool) or not isinstance(max_keys, int) or max_keys < 1:
            raise ConfigError(f"max_keys must be a positive integer, got {max_keys!r}")
        if isinstance(max_networks, bool) or not isinstance(max_networks, int) or max_networks < 1:
            raise ConfigError(f"max_networks must be a positive integer, got {max_networks!r}")
        self._clock = clock
        self._max_keys = max_keys
        self._max_networks = max_networks
        self._source: Source = source
        self._lock = threading.Lock()
        _STORAGES.add(self)
        # key -> (expires at ms, state), updated in place.
        self._states: dict[str, tuple[int, Any]] = {}
        # Every key of _states once, the next one for the sweep to look at first; only the
        # sweep deletes from _states, so the two always hold the same keys.
        self._order: deque[str] = deque()
        # overflow key -> (expires at ms, state): one per quota, used while _states is full
        # by new keys that are no address, and by addresses whose network finds no room.
        self._overflow: dict[str, tuple[int, Any]] = {}
        # network overflow key -> (expires at ms, state): one per (network, quota), used
        # while _states is full by new address subjects; at most max_networks, and every
        # key of it once in _network_order (only _make_network_room deletes from it).
        self._networks: dict[str, tuple[int, Any]] = {}
        self._network_order: deque[str] = deque()
        self._writes = 0
        self._full_at: int | None = None  # when _make_room last found nothing to drop
        self._networks_full_at: int | None = None  # when _make_network_room last did
        self.overflowing = False
        self.overflowed = 0
        self.overflowed_shared = 0

    def now(self) -> int:
        """The storage clock in integer milliseconds."""
        return int(self._clock() * 1000)

    def __len__(self) -> int:
        """The states held: the tenants' (expired ones until swept) and the overflow ones."""
        return len(self._states) + len(self._overflow) + len(self._networks)

    # -- the storage protocol ------------------------------------------------------------

    def acquire(self, debit: Debit) -> Decision:
        key, cost, quotas, now, costs, _, _ = debit
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
        """:meth:`acquire` for arguments already checked: the limiter's in-process path, which
        checks them first and builds no :class:`Debit` (a fifth of a microsecond, a tenth of
        a decision's time).

        One quota of a key that has a state, the common case, is decided here, inlined. A
        key with no state under its plain name (a new key, or one stored as its digest) goes
        to :meth:`_acquire_new`. A plain key is only ever stored through there, which checks
        that it is short, so a long key never matches here.
        """
        if now is None:
            now = int(self._clock() * 1000)
        if len(quotas) != 1 or costs is not None or quotas[0].max_queued:
            return self._acquire_many(key, cost, quotas, now, costs)
        quota = quotas[0]
        if key.__class__ is str:
            k = f"{quota.state_name}\0{key}"
        elif key is None:
            k = f"{quota.state_name}\1"
        else:  # a shard of the shared scope (ShardKey): never a tenant's name
            k = quota.state_name + tenant_part(key)
        algorithm = quota.algorithm
        check = ALGORITHMS[algorithm][0]
        states = self._states
        with self._lock:
            entry = states.get(k)
            if entry is not None:
                allowed, exceeds, new, remaining, retry_ms, reset_ms, ttl = check(
                    None if entry[0] <= now else entry[1], now, cost, *quota.check_params
                )
                if allowed and new is not None:
                    if ttl > 0:
                        if algorithm == "sliding_log":  # the only state commit() changes
                            new = commit(algorithm, new)
                        states[k] = (now + ttl, new)
                    else:  # the new state is the empty one
                        states[k] = _EMPTY
                    self._writes += 1
                    if not self._writes & _SWEEP_MASK:
                        self._sweep(now)
        if entry is None:
            return self._acquire_new(key, k, cost, quota, now)
        return decide_one(
            quota, allowed, exceeds, remaining, retry_ms, reset_ms, cost, self._source, now
        )

    def _acquire_new(
        self, key: str | None, k: str, cost: float, quota: Quota, now: int
    ) -> Decision:
        """:meth:`acquire` for one quota, through the key mapping and the overflow (``k``:
        the key's plain state key)."""
        if key is not None and (len(key) > PLAIN_TENANT_MAX or not key.isascii()):
            k = quota.state_name + tenant_part(key)  # hashed outside the lock
        algorithm = quota.algorithm
        table = states = self._states
        with self._lock:
            entry = states.get(k)
            if entry is None:
                if len(states) >= self._max_keys and not self._make_room(now):
                    ((table, k),) = self._overflow_targets(key, [quota], now)
                    entry = table.get(k)
                    self.overflowing = True
                    self.overflowed += 1
                    if table is self._overflow:
                        self.overflowed_shared += 1
                else:
                    self.overflowing = False
            state = None if entry is None or entry[0] <= now else entry[1]
            allowed, exceeds, new, remaining, retry_ms, reset_ms, ttl = ALGORITHMS[algorithm][0](
                state, now, cost, *quota.check_params
            )
            if allowed and new is not None:
                self._write(table, k, now, ttl, commit(algorithm, new))
        return decide_one(
            quota, allowed, exceeds, remaining, retry_ms, reset_ms, cost, self._source, now
        )

    def _acquire_many(
        self,
        key: str | None,
        cost: float,
        quotas: Sequence[Quota],
        now: int,
        costs: Sequence[float] | None,
    ) -> Decision:
        amounts = costs if costs is not None else [cost] * len(quotas)
        part = tenant_part(key)
        keys = [quota.state_name + part for quota in quotas]
        states = self._states
        with self._lock:
            # Room for the new keys first: only expired states are dropped, and one of
            # them may be a key of this very call, so the keys are looked up after.
            free = self._max_keys - len(states)
            needed = 0
            for k, amount in zip(keys, amounts, strict=True):
                if amount and k not in states:
                    needed += 1
            while free < needed and self._make_room(now):
                free += 1
            targets: list[tuple[dict[str, tuple[int, Any]], str]] = []
            overflowed: list[int] = []  # the indexes of the quotas without room
            for k, quota, amount in zip(keys, quotas, amounts, strict=True):
                if k in states:
                    targets.append((states, k))
                elif not amount:
                    # Checked at cost 0 (the time quota): nothing will be written, so it
                    # takes no room; it is read where a charge of it went (an overflow
                    # state while the table is full), and it is no overflowed decision.
                    targets.append(self._target(key, k, quota))
                elif free > 0:
                    free -= 1
                    targets.append((states, k))
                    self.overflowing = False
                else:
                    overflowed.append(len(targets))
                    targets.append((states, k))  # replaced below
            if overflowed:
                shared = self._overflow_targets(key, [quotas[i] for i in overflowed], now)
                for i, target in zip(overflowed, shared, strict=True):
                    targets[i] = target
                self.overflowing = True
                self.overflowed += 1
                if any(table is self._overflow for table, _ in shared):
                    self.overflowed_shared += 1
            checks: list[Check] = []
            allowed = True
            wait = 0.0  # the longest reservation's wait (ms) of the allowed checks
            for (table, k), quota, amount in zip(targets, quotas, amounts, strict=True):
                entry = table.get(k)  # _get() inlined
                check = ALGORITHMS[quota.algorithm][0](
                    None if entry is None or entry[0] <= now else entry[1],
                    now,
                    amount,
                    *quota.check_params,
                )
                if quota.max_queued:
                    check = self._queued(table, k, quota, check, now)
                if not check.allowed:
                    allowed = False
                elif check.retry_after_ms > wait:
                    wait = check.retry_after_ms
                checks.append(check)
            if allowed:
                # It runs after its longest reservation: it waits in every line till then
                # (a refund of its debit names that turn: Decision.at + Decision.delay).
                for (table, k), quota, check in zip(targets, quotas, checks, strict=True):
                    state = check.state
                    if state is not None:
                        if quota.max_queued and check.retry_after_ms > 0:
                            self._wait_in_line(table, k, now, wait)
                        state = commit(quota.algorithm, state)
                        self._write(table, k, now, check.ttl_ms, state)
        return combine(quotas, checks, cost, self._source, costs, now)

    def _queued(self, table: _Table, k: str, quota: Quota, check: Check, now: int) -> Check:
        """``check``, refused if it is a reservation and ``quota.max_queued`` requests already
        wait their turn (its retry: when the first of them runs)."""
        if not (quota.max_queued and check.allowed and check.retry_after_ms > 0):
            return check
        line = _line(table, k, now)
        if len(line) < quota.max_queued:
            return check
        retry = min(line) - now
        return check._replace(allowed=False, state=None, retry_after_ms=max(1, retry), ttl_ms=0)

    def _wait_in_line(self, table: _Table, k: str, now: int, wait: float) -> None:
        """Count a reservation among the requests waiting for ``k`` until it runs.

        The line lives until its last waiter's turn (and a second more), not this one's: a
        refund may have moved the bucket back, so a later reservation can wait less than
        one already in the line, and a line forgotten early would let more than
        ``max_queued`` wait."""
        line = _line(table, k, now)
        line.append(now + wait)
        self._write_line(table, k, now, line)

    def _leave_line(self, table: _Table, k: str, now: int, turn: int) -> None:
        """Take one waiter of ``turn`` out of the line of ``k`` (it left before its turn)."""
        line = _line(table, k, now)
        if turn in line:
            line.remove(turn)
            self._write_line(table, k, now, line)

    def _write_line(self, table: _Table, k: str, now: int, line: list[float]) -> None:
        """Store the line of ``k`` until its last waiter's turn and a second more."""
        self._write(table, _line_key(k), now, int(max(line, default=now)) - now + 1000, line)

    def refund(self, debit: Debit) -> None:
        check_arguments(debit.amount, debit.quotas, debit.amounts)
        self.give_back(debit)

    def give_back(self, debit: Debit) -> None:
        """:meth:`refund` for arguments already checked: the limiter's in-process path.

        One quota of a key that has a state under its plain name, the common case, is given
        back here, inlined (as :meth:`decide` finds it); any other refund goes through the
        key mapping and the overflow states (:meth:`_each`).
        """
        key, amount, quotas, now, amounts, at, turn = debit
        if now is None:
            now = int(self._clock() * 1000)
        if len(quotas) == 1 and amounts is None and amount and not quotas[0].max_queued:
            quota = quotas[0]
            if key.__class__ is str:
                k = f"{quota.state_name}\0{key}"
            elif key is None:
                k = f"{quota.state_name}\1"
            else:  # a shard of the shared scope (ShardKey): never a tenant's name
                k = quota.state_name + tenant_part(key)
            states = self._states
            with self._lock:
                entry = states.get(k)
                if entry is not None:
                    refund = ALGORITHMS[quota.algorithm][1]
                    state, ttl = refund(
                        None if entry[0] <= now else entry[1], now, amount, *quota.params, at
                    )
                    states[k] = _EMPTY if state is None or ttl <= 0 else (now + ttl, state)
                    return

        def give_back(table: _Table, k: str, quota: Quota, given: float, now: int) -> None:
            if turn is not None and turn > now and quota.max_queued:
                self._leave_line(table, k, now, turn)
            if k not in table:
                return  # a full quota: nothing to give back, nothing to write
            refund = ALGORITHMS[quota.algorithm][1]
            state, ttl = refund(_get(table, k, now), now, given, *quota.params, at)
            table[k] = _EMPTY if state is None or ttl <= 0 else (now + ttl, state)

        self._each(key, amount, quotas, now, amounts, give_back)

    def charge(self, debit: Debit) -> None:
        """Debit every quota of ``debit.key`` its amount whether it fits or not: a bucket may
        go below empty and admits nothing until it has refilled past the debt (what another
        region admitted, applied here: docs/scale-out.md)."""
        key, amount, quotas, now, amounts, _, _ = debit
        check_arguments(amount, quotas, amounts)

        def charge(table: _Table, k: str, quota: Quota, given: float, now: int) -> None:
            state, ttl = CHARGES[quota.algorithm](_get(table, k, now), now, given, *quota.params)
            if state is None or ttl <= 0:
                if k in table:
                    table[k] = _EMPTY
            else:
                self._write(table, k, now, ttl, state)

        self._each(key, amount, quotas, now, amounts, charge)

    def _each(
        self,
        key: str | None,
        amount: float,
        quotas: Sequence[Quota],
        now: int | None,
        amounts: Sequence[float] | None,
        change: Callable[[_Table, str, Quota, float, int], None],
    ) -> None:
        """``change`` each quota's state of ``key`` that is given an amount above 0, under
        the lock (a refund, a charge; their arguments checked)."""
        each = amounts if amounts is not None else [amount] * len(quotas)
        now = int(self._clock() * 1000) if now is None else now
        part = tenant_part(key)
        with self._lock:
            for quota, given in zip(quotas, each, strict=True):
                if given != 0:
                    table, k = self._target(key, quota.state_name + part, quota)
                    change(table, k, quota, given, now)

    def peek(self, key: str | None, quotas: Sequence[Quota], now: int | None = None) -> Decision:
        check_arguments(0, quotas)
        now = self.now() if now is None else now
        part = tenant_part(key)
        with self._lock:
            checks = []
            for quota in quotas:
                table, k = self._target(key, quota.state_name + part, quota)
                check = ALGORITHMS[quota.algorithm][0]
                checked = check(_get(table, k, now), now, 0.0, *quota.check_params)
                checks.append(self._queued(table, k, quota, checked, now))
        return combine(quotas, checks, 0.0, self._source, None, now)

    def leases(self) -> MemoryLeases:
        """A new :class:`~quotaql.storage.memory_leases.MemoryLeases`: lease sets in this
        process's memory too (on their default clock)."""
        return MemoryLeases()

    def clear(self) -> None:
        """Forget every state."""
        with self._lock:
            self._states.clear()
            self._order.clear()
            self._overflow.clear()
            self._networks.clear()
            self._network_order.clear()
            self._full_at = self._networks_full_at = None
            self.overflowing = False

    # -- state table ---------------------------------------------------------------------

    def _target(
        self, key: str | None, k: str, quota: Quota
    ) -> tuple[dict[str, tuple[int, Any]], str]:
        """Where a refund or a peek of ``key``'s state ``k`` goes: its state, else, while the
        table is full, the overflow state a key without a state was debited on: its
        network's (if it has one, or has room), else its quota's last resort."""
        if k in self._states or len(self._states) < self._max_keys:
            return self._states, k
        network = overflow_network(key)
        if network is not None:
            found = _network_key(quota, network)
            if found in self._networks or len(self._networks) < self._max_networks:
                return self._networks, found
        return self._overflow, _overflow_key(quota)

    def _overflow_targets(
        self, key: str | None, quotas: Sequence[Quota], now: int
    ) -> list[tuple[_Table, str]]:
        """Where each of ``quotas`` of a new ``key`` is decided while the table is full: its
        network's overflow state for an address subject while there is room for it among
        ``max_networks`` (refilled ones make room), else its quota's last resort."""
        network = overflow_network(key)
        if network is None:
            return [(self._overflow, _overflow_key(quota)) for quota in quotas]
        networks = self._networks
        if len(quotas) == 1:  # the common case, in short
            k = _network_key(quotas[0], network)
            if k in networks or len(networks) < self._max_networks or self._make_network_room(now):
                return [(networks, k)]
            return [(self._overflow, _overflow_key(quotas[0]))]
        keys = [_network_key(quota, network) for quota in quotas]
        # Room first (only expired states are dropped, perhaps one of these keys), then
        # the keys are looked up: as _acquire_many does for the tenants' states.
        free = self._max_networks - len(networks)
        needed = sum(k not in networks for k in keys)
        while free < needed and self._make_network_room(now):
            free += 1
        lasts = [_overflow_key(quota) for quota in quotas]
        return network_places(keys, lasts, networks, self._overflow, free)

    def _write(
        self, table: dict[str, tuple[int, Any]], k: str, now: int, ttl_ms: int, state: object
    ) -> None:
        """Store an allowed request's state (room for a new key was made before)."""
        if state is None:  # nothing to write (a sliding log asked for cost 0)
            return
        if ttl_ms <= 0:  # equal to the empty state: a new key needs nothing stored
            if k in table:
                table[k] = _EMPTY
            return
        if k not in table:
            if table is self._states:
                self._order.append(k)
            elif table is self._networks:
                self._network_order.append(k)
        table[k] = (now + ttl_ms, state)
        self._writes += 1
        if not self._writes & _SWEEP_MASK:
            self._sweep(now)

    def _make_room(self, now: int) -> bool:
        """Drop one expired state, looking at a few; False if all of them still matter."""
        if now == self._full_at:
            return False
        if drop_stale(self._states, self._order, lambda state: state[0] <= now, _ROOM_BATCH):
            return True
        self._full_at = now
        return False

    def _make_network_room(self, now: int) -> bool:
        """Drop one expired network overflow state, looking at a few; False if all of them
        still matter."""
        if now == self._networks_full_at:
            return False
        if drop_stale(
            self._networks, self._network_order, lambda state: state[0] <= now, _ROOM_BATCH
        ):
            return True
        self._networks_full_at = now
        return False

    def _sweep(self, now: int) -> None:
        """Drop the expired states among the next few (bounded work per call)."""
        states, order = self._states, self._order
        for _ in range(min(_SWEEP_BATCH, len(order))):
            k = order.popleft()
            if states[k][0] <= now:
                del states[k]
            else:
                order.append(k)


def _line(table: _Table, k: str, now: int) -> list[float]:
    """When the requests waiting for the state ``k`` run (those still to run), as the Redis
    script's set of them (``<key>#w``) holds them."""
    waiting: list[float] | None = _get(table, _line_key(k), now)
    return [] if waiting is None else [when for when in waiting if when > now]


_KIND = re.compile("[\x00-\x03]")  # what ends a state's name in its key: a tenant, or overflow


def _line_key(k: str) -> str:
    """The key of the line of requests waiting for the state ``k``: ``#w`` after the
    quota's name, where no name has one (after the tenant, a tenant ``acme#w`` would have
    its state under the key of ``acme``'s line)."""
    found = _KIND.search(k)
    end = len(k) if found is None else found.start()
    return f"{k[:end]}#w{k[end:]}"


def _get(table: dict[str, tuple[int, Any]], k: str, now: int) -> Any:
    """The live state of ``k`` in ``table``, or None (absent or expired: the empty one)."""
    entry = table.get(k)
    if entry is None or entry[0] <= now:
        return None
    return entry[1]


def _network_key(quota: Quota, network: str) -> str:
    """The overflow state's key of a quota for the new address subjects of ``network``."""
    return f"{_overflow_key(quota)}\4{network}"


def _overflow_key(quota: Quota) -> str:
    """The overflow state's key of a quota: its name and algorithm (not a ``per_user``
    quota's scope, so one per quota, not one per user) and its parameters (tiers that share
    a quota name keep their own size)."""
    return f"{quota.state_name.partition('!')[0]}\3{quota.script_args}"


# Every MemoryStorage, for a forked child: a lock another thread held at fork stays held in
# the child, whose every decision would then wait for it forever.
_STORAGES: weakref.WeakSet[MemoryStorage] = weakref.WeakSet()


def _new_locks_in_child() -> None:
    for storage in list(_STORAGES):
        storage._lock = threading.Lock()


os.register_at_fork(after_in_child=_new_locks_in_child)
