"""Worker time: what an operation took of the process that served it, measured where the
gate can see it, and the time quota (``[limits] time``, ``[tiers.<t>] time``) it is charged to.

**The clock.** :data:`CLOCK` is ``time.thread_time_ns``, the CPU time of the calling thread,
where the platform has it (Linux, macOS, Windows); else ``time.monotonic_ns``, wall time
(:data:`CLOCK_SOURCE` says which). CPU time is what a hostile document costs a worker (a
validation that compares pairs, a resolver that loops), and what an operation waiting for
its database does not.

**What is measured.** The phases of an operation, each on the thread that runs it:

- parsing, the static pass and validation: between :meth:`~quotaql.gate.Gate.start_work` and
  :meth:`~quotaql.gate.Gate.stop_work` (the adapters call them around their own parsing and
  validation; :meth:`~quotaql.gate.Gate.parse` measures itself), and the pricing inside
  ``admit``: *exclusive* phases, which run without yielding to an event loop, so the
  thread's CPU time over them is theirs alone;
- execution, from the end of ``admit`` to ``settle``: a *shared* phase. On a server with a
  thread per request it is the thread's CPU time too. On an event loop, the operations in
  execution at once share the loop's thread, and its CPU time between two moments is
  theirs together (an async resolver awaiting its database yields to the others): each
  operation in execution is charged an equal share of the thread's CPU time while it is in
  execution (processor sharing), the exclusive phases of other operations left out. Alone
  on its loop, an operation is charged exactly its own.

What the gate does not see is not measured: the identity hooks (a key lookup), the body's
reading and decoding, the serialisation of the response. A phase that ends on another
thread than it began on (a server that hands execution to a thread pool) is not counted.

**The charge.** What an operation took is debited from its subject's time quota when the
gate is done with it (settled, rejected, or refused after it was parsed), whether it fits or
not (the bucket may go below zero), as an overage is: the time quota is checked, at cost 0,
with the operation's other quotas before it runs, and refuses while the subject is in debt
(``RATE_LIMITED``, ``extensions.quota = "time"``). So that an honest operation of a
millisecond costs no storage call of its own, each process adds up what a subject took
(:class:`Ledger`) and charges it once it reaches :data:`CHARGE_AT_MS`: a subject owes at
most that much per process uncharged.
"""

from __future__ import annotations

import functools
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Final

from quotaql._flow import Acquire, Charge
from quotaql.policy.quota import TIME_QUOTA

if TYPE_CHECKING:
    from collections.abc import Callable, Generator

    from quotaql.gate.operation import Operation, Work
    from quotaql.policy.quota import Decision, Quota

__all__ = [
    "CHARGE_AT_MS",
    "CLOCK",
    "CLOCK_SOURCE",
    "Ledger",
    "acquire",
    "admitted",
    "charge",
    "points",
    "ran",
    "run",
    "start",
    "stop",
]


def _pick_clock() -> tuple[Callable[[], int], str]:
    """The thread's CPU time where the platform has it, else monotonic wall time."""
    try:
        time.thread_time_ns()
    except (AttributeError, OSError):  # pragma: no cover - a platform without it
        return time.monotonic_ns, "wall"
    return time.thread_time_ns, "thread_cpu"


CLOCK, CLOCK_SOURCE = _pick_clock()
#: What a subject's operations took in a process, in ms, before it is charged (one storage
#: call); a heavier operation is charged at once.
CHARGE_AT_MS: Final = 25.0
#: The most subjects a process keeps uncharged time of (past it, the oldest is forgotten).
LEDGER_SIZE: Final = 100_000
#: How long a process lets a subject whose time quota it found not in debt run without
#: checking that quota again (its own charges of the subject's time make it check at once).
CHECK_EVERY_S: Final = 1.0


class _Thread(threading.local):
    """A thread's shared phases: the operations in execution on it (held weakly, by id: one
    its adapter never settled nor finished leaves when it is collected, not never), and the
    CPU time each was entitled to since the thread started (``share``, ns), as of ``last``."""

    def __init__(self) -> None:
        # A dict of weak references, not a WeakSet: its adds, removals and length are C
        # calls, and this runs twice per operation.
        self.running: dict[int, weakref.ref[Work]] = {}
        self.share = 0.0
        self.last = CLOCK()

    def forget(self, key: int, _collected: object = None) -> None:
        """An operation in execution on this thread was collected without :func:`ran` (its
        weak reference's callback)."""
        self.running.pop(key, None)


_threads = _Thread()


def _advance(state: _Thread, now: int) -> None:
    """Give the thread's CPU time since ``state.last`` to the operations in execution."""
    active = len(state.running)
    if active > 0:
        state.share += (now - state.last) / active
    state.last = now


def start(work: Work) -> None:
    """An exclusive phase of ``work``'s operation begins on this thread."""
    if work.phase is not None:
        return
    now = CLOCK()
    _advance(_threads, now)
    work.phase = (threading.get_ident(), now)


def stop(work: Work) -> None:
    """The exclusive phase of ``work``'s operation ends: its CPU time is the operation's own
    (none of it goes to the operations in execution on this thread)."""
    phase = work.phase
    if phase is None:
        return
    work.phase = None
    thread, began = phase
    if thread != threading.get_ident():
        return  # ended on another thread: not a measure of anything
    now = CLOCK()
    work.ns += now - began
    _threads.last = now


def run(work: Work) -> None:
    """``work``'s operation starts executing on this thread (a shared phase)."""
    if work.running is not None:
        return
    state = _threads
    _advance(state, CLOCK())
    key = id(work)
    state.running[key] = weakref.ref(work, functools.partial(state.forget, key))
    work.running = (state, threading.get_ident(), state.share)


def ran(work: Work) -> None:
    """``work``'s operation stopped executing: its share of the thread's time since
    :func:`run` is added (nothing when it ends on another thread)."""
    running = work.running
    if running is None:
        return
    work.running = None
    state, thread, began = running
    if thread == threading.get_ident():
        _advance(state, CLOCK())
        work.ns += state.share - began
    state.running.pop(id(work), None)


class Ledger:
    """What each subject's operations took and was not charged yet, per time quota, in this
    process: bounded (:data:`LEDGER_SIZE` subjects; the oldest is dropped, never charged,
    past it), thread-safe."""

    def __init__(self, size: int = LEDGER_SIZE, threshold: float = CHARGE_AT_MS) -> None:
        self._lock = threading.Lock()
        self._owed: dict[tuple[str, Quota], float] = {}
        # The subjects whose time quota was found not in debt: until when it needs no check.
        self._solvent: dict[str, tuple[Quota, float]] = {}
        self.size = size
        self.threshold = threshold

    def due(self, key: str, quota: Quota) -> bool:
        """Whether ``key``'s next debit checks its time ``quota`` (at cost 0): unless this
        process found it not in debt less than :data:`CHECK_EVERY_S` ago and charged it
        nothing since. Another process's charges are seen within that delay."""
        found = self._solvent.get(key)
        return found is None or found[0] is not quota or time.monotonic() >= found[1]

    def solvent(self, key: str, quota: Quota) -> None:
        """``key``'s time ``quota`` was found not in debt just now."""
        with self._lock:
            solvent = self._solvent
            solvent.pop(key, None)
            solvent[key] = (quota, time.monotonic() + CHECK_EVERY_S)
            if len(solvent) > self.size:
                del solvent[next(iter(solvent))]

    def __len__(self) -> int:
        return len(self._owed)

    def owe(self, key: str, quota: Quota, ms: float) -> float:
        """Add ``ms`` to what ``key`` owes its ``quota``: what to charge now (all it owes,
        once it reaches the threshold), else 0."""
        slot = (key, quota)
        with self._lock:
            owed = self._owed.pop(slot, 0.0) + ms
            if owed >= self.threshold:
                self._solvent.pop(key, None)  # charged now: checked on its next debit
                return owed
            self._owed[slot] = owed  # re-inserted last: the most recent
            if len(self._owed) > self.size:
                del self._owed[next(iter(self._owed))]
        return 0.0


def acquire(
    op: Operation,
    charge: float | None = None,
    quotas: tuple[Quota, ...] | None = None,
    costs: tuple[float, ...] | None = None,
    ledger: Ledger | None = None,
) -> Acquire:
    """The debit of ``op`` (``charge`` on ``quotas``, each its own of ``costs``; by default
    the operation's) with its time quota checked too, at cost 0: refused while the
    subject's worker time is in debt (:func:`points` takes it out of the decision). With
    ``ledger``, only when it is due (:meth:`Ledger.due`)."""
    if charge is None:
        charge, quotas, costs = op.charge, op.quotas, op.costs
    quotas = quotas or ()
    quota = op.time
    if quota is None or (ledger is not None and not ledger.due(op.subject.key, quota)):
        return Acquire(op.subject.key, charge, quotas, costs)
    amounts = costs if costs is not None else (charge,) * len(quotas)
    return Acquire(op.subject.key, charge, (*quotas, quota), (*amounts, 0.0))


def admitted(op: Operation, ledger: Ledger) -> Generator[Any, Any, float] | None:
    """After ``admit``: an operation that runs starts its execution's measure (not a
    subscription, which lives on; its events are charged their points); one that does not
    is charged the worker time it took so far (parsing, validation, pricing): the flow of
    that charge, to drive (None: nothing to drive)."""
    if op.error is not None or op.header == "validate":  # it does not run
        return charge(op, ledger)
    if op.operation_type != "subscription":
        run(op.work)
    return None


def charge(
    op: Operation, ledger: Ledger, overage: Charge | None = None
) -> Generator[Any, Any, float]:
    """Charge what ``op`` took to its time quota, once (with ``overage``, the charge of what it
    ran above its debit, in the same call): the milliseconds charged now (0: owed, or none)."""
    work = op.work
    stop(work)
    ran(work)
    quota = op.time
    ms = 0.0
    if quota is not None and not work.charged:
        work.charged = True
        ms = ledger.owe(op.subject.key, quota, work.ms)
    if quota is None or not ms:
        if overage is not None:
            yield overage
        return 0.0
    if overage is None:  # a debit made in the storage now: charged whatever was decided
        yield Charge(op.subject.key, 0.0, (quota,), (ms,))
        return ms
    _, amount, quotas, amounts, decision = overage
    each = amounts if amounts is not None else (amount,) * len(quotas)
    yield Charge(op.subject.key, amount, (*quotas, quota), (*each, ms), decision)
    return ms


def points(
    decision: Decision, op: Operation | None = None, ledger: Ledger | None = None
) -> Decision:
    """``decision`` (of an operation's quotas and its time quota) as the operation's points
    see it: without the time quota's status, unless the time quota refused it. With ``op``
    and ``ledger``: a time quota found not in debt is noted (:meth:`Ledger.solvent`)."""
    statuses = decision.quotas
    if decision.limited_by == TIME_QUOTA:
        return decision
    if not statuses or statuses[-1].name != TIME_QUOTA:  # acquire() puts it last
        for status in statuses:
            if status.name == TIME_QUOTA:
                break
        else:
            return decision  # (a loop, not all(): no generator on every request)
        kept = tuple(status for status in statuses if status.name != TIME_QUOTA)
    else:
        kept = statuses[:-1]
        solvent = statuses[-1].remaining > 0
        if solvent and ledger is not None and op is not None and op.time is not None:
            ledger.solvent(op.subject.key, op.time)
    if not decision.allowed or not kept:
        return decision._replace(quotas=kept)
    tightest = kept[0]
    for status in kept[1:]:
        if status.remaining < tightest.remaining:
            tightest = status
    return decision._replace(
        remaining=tightest.remaining,
        limit=tightest.limit,
        reset_after=tightest.reset_after,
        quotas=kept,
    )
