"""Sans-IO flows: one body for sync and async servers and storages.

A flow is a generator that yields the steps it needs (a limiter's debit, a lease, an
awaitable of a hook) and receives their results. :func:`drive` runs it: with plain calls
while the steps answer at once, and from the first step that answers an awaitable (an async
storage, an async hook) as a coroutine that awaits each such answer. The gate and the limiter
each say how to make their steps (``run``); the driving is written once, here.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Generator, Sequence

    from quotaql.policy.quota import Decision, Quota
    from quotaql.storage.leases import LeaseSpec

__all__ = [
    "Acquire",
    "Await",
    "Charge",
    "Refund",
    "ReleaseLease",
    "TakeLease",
    "drive",
    "is_pending",
]


class Acquire(NamedTuple):
    """Debit ``amount`` (or each quota its own of ``costs``) from ``key``'s ``quotas``."""

    key: str
    amount: float
    quotas: Sequence[Quota]
    costs: Sequence[float] | None = None


class Refund(NamedTuple):
    """Give ``amount`` (or each quota its own of ``amounts``) back, for the debit of
    ``decision``."""

    key: str
    amount: float
    quotas: Sequence[Quota]
    amounts: Sequence[float] | None = None
    decision: Decision | None = None


class Charge(NamedTuple):
    """Debit ``amount`` (or each quota its own of ``amounts``) more, whether it fits or not:
    what an operation ran above what ``decision`` debited (its overage). The quotas may go
    below empty; the subject waits until they refill."""

    key: str
    amount: float
    quotas: Sequence[Quota]
    amounts: Sequence[float] | None = None
    decision: Decision | None = None


class TakeLease(NamedTuple):
    """Take the lease ``lease`` of ``key`` in the lease sets of ``specs``."""

    key: str
    specs: tuple[LeaseSpec, ...]
    lease: str


class ReleaseLease(NamedTuple):
    """Give ``lease`` (a :class:`~quotaql.limiter.concurrency.Lease`) back now: ``owner``,
    its operation, was refused after taking it."""

    lease: Any
    owner: object


class Await(NamedTuple):
    """Wait for ``awaitable`` (an async hook, a sleep): only an async driver yields it."""

    awaitable: Awaitable[Any]


def is_pending(value: object) -> bool:
    """An answer still to wait for (an awaitable), not a value."""
    return (
        value is not None
        and not isinstance(value, tuple | str | int | float)  # a Decision, an outcome...
        and inspect.isawaitable(value)
    )


def drive(
    flow: Generator[Any, Any, Any],
    run: Callable[[Any], Any],
    throws: tuple[type[BaseException], ...] = (),
    after: Callable[[Any, Any], None] | None = None,
    value: Any = None,
    error: BaseException | None = None,
) -> Any:
    """Drive ``flow``, making each step it yields with ``run(step)``: the flow's value when
    every step answers at once, or, from the first step that answers an awaitable, an
    awaitable of it (the rest of the flow is driven once that answer is in).

    ``throws``: the errors of a step (raised by ``run`` or by awaiting its answer) that are
    raised inside the flow, for it to decide; any other error closes the flow (what it holds
    is given back) and goes up. ``after(step, answer)`` sees each answer (the limiter
    remembers the storage's reports with it). ``value`` / ``error``: where to resume.
    """
    try:
        while True:
            step = flow.send(value) if error is None else flow.throw(error)
            error = None
            try:
                value = run(step)
            except throws as exc:
                error = exc
                continue
            if is_pending(value):
                return _drive_later(flow, run, throws, after, step, value)
            if after is not None:
                after(step, value)
    except StopIteration as stop:
        return stop.value
    except BaseException:
        flow.close()  # what the flow holds (a subscription's slot, a lease) is given back
        raise


async def _drive_later(
    flow: Generator[Any, Any, Any],
    run: Callable[[Any], Any],
    throws: tuple[type[BaseException], ...],
    after: Callable[[Any, Any], None] | None,
    step: Any,
    pending: Awaitable[Any],
) -> Any:
    """The rest of :func:`drive` once ``pending`` (the answer to ``step``) is in."""
    value: Any = None
    error: BaseException | None = None
    try:
        value = await pending
    except throws as exc:
        error = exc
    except BaseException:  # cancelled (the client left) or failed
        flow.close()
        raise
    else:
        if after is not None:
            after(step, value)
    rest = drive(flow, run, throws, after, value, error)
    return await rest if is_pending(rest) else rest
