"""``@defer`` and ``@stream``: an operation delivered in payloads, priced whole and settled
once.

graphql-core 3.3 runs such an operation as an initial result and a stream of subsequent
payloads (``ExperimentalIncrementalExecutionResults``), which the server sends after the
adapter's hooks returned. The operation was priced and debited whole before it ran (a
deferred fragment and a streamed list count fully, ``initialCount`` or not: the analyzer
knows neither directive). :func:`follow` follows the stream from there:

- each payload, as it is handed to the server, is counted (a span event, and
  ``quotaql_incremental_payloads_total``) and merged into the operation's data, as the
  client assembles it;
- once the last payload is built, the operation is settled from all its data, as if it had
  run in one piece (refund, or overage with ``charge_overage``; that payload carries
  ``extensions.cost``), then recorded, its lease and time released;
- when the stream closes before its last payload (the client left: the server closed or
  cancelled the response, or dropped it unread), the operation is settled then, once, and
  keeps its whole debit: what ran for the payloads never sent is not known, and giving it
  back would let a client have the work for free by leaving just before it is delivered.

graphql-core's stream is a generator the server iterates: it cannot be replaced under the
server, so its parts are followed where graphql-core 3.3 builds each payload (its
publisher, found in the generator's frame before it starts) and where it ends (its
executor's ``async_work_finished`` hook, and the generator's collection when it was never
started). A graphql-core whose stream is built
otherwise is not followed: the operation keeps its whole debit, as before, and
``quotaql_incremental_operations_total{outcome="unfollowed"}`` counts it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from typing import TYPE_CHECKING, Any

from graphql import GraphQLError

from quotaql._flow import drive, is_pending
from quotaql.instrumentation import names

if TYPE_CHECKING:
    from collections.abc import Sequence

    from quotaql.gate.core import Gate
    from quotaql.gate.operation import Operation

__all__ = ["follow", "following", "is_incremental"]

# What an operation whose client left before its last payload is settled with: an error
# without a path says that what ran is not known (gate.settle keeps the whole debit).
_LEFT = GraphQLError("The client left before the last payload was sent.")

# The operations whose payloads are followed, until they are settled.
_followed: weakref.WeakKeyDictionary[Operation, _Follower] = weakref.WeakKeyDictionary()
# The settlements under way on an event loop (a task nobody holds may be collected).
_settling: set[asyncio.Task[None]] = set()


def is_incremental(result: Any) -> bool:
    """``result`` is graphql-core's incremental delivery: an initial result and a stream."""
    return hasattr(result, "initial_result") and hasattr(result, "subsequent_results")


def following(op: Operation) -> bool:
    """``op``'s payloads are followed and it is not settled yet: the follower records it
    (``Gate.finish``) once it is, not the adapter's end of the request."""
    return op in _followed


def follow(gate: Gate, op: Operation, result: Any) -> bool:
    """Follow the payloads of ``result`` (an incremental delivery of ``op``, which ran):
    the initial result carries ``extensions.cost`` now, the operation is settled and
    recorded once the last payload is sent or the stream closes. False: the stream could
    not be followed (it is counted, and ``op`` keeps its whole debit)."""
    initial = result.initial_result
    # Adaptive limits' sample (latency, errors) is the initial result's: a stream lasts as
    # long as its client reads it, and a client that leaves is no failure of the server.
    gate._scaling.observe(op, initial.errors)
    cost = gate.results(op)
    if cost:
        initial.extensions = {**(initial.extensions or {}), **cost}
    parts = _parts(result.subsequent_results)
    tier = op.tier.name
    if parts is None:
        metrics = gate.metrics
        if metrics is not None:
            metrics.incremental.ended(tier, names.INCREMENTAL_UNFOLLOWED)
        gate.log.log(
            logging.WARNING,
            names.INCREMENTAL_UNFOLLOWED_EVENT,
            "quotaql: this graphql-core's @defer/@stream payloads cannot be followed: the"
            " operations keep their whole debit (docs/strawberry.md)",
        )
        return False
    publisher, executor = parts
    follower = _Follower(gate, op, initial)
    _followed[op] = follower
    built = publisher._handle_batch

    def handled(batch: Any) -> Any:
        payload = built(batch)
        follower.sent(payload)
        return payload

    publisher._handle_batch = handled
    hooks = executor.hooks
    before = None if hooks is None else hooks.async_work_finished

    def finished(info: Any) -> None:
        follower.closed()
        if before is not None:
            before(info)

    executor.hooks = (
        _hooks(finished) if hooks is None else hooks._replace(async_work_finished=finished)
    )
    # A stream the server never started runs no cleanup: its collection is the end (not at
    # the interpreter's exit: no loop is left to settle on).
    weakref.finalize(result.subsequent_results, follower.closed).atexit = False
    return True


def _parts(stream: Any) -> tuple[Any, Any] | None:
    """graphql-core 3.3's publisher and executor of ``stream`` (not started yet), or None
    when it is built otherwise."""
    frame = getattr(stream, "ag_frame", None)
    if frame is None or getattr(stream, "ag_running", True):
        return None
    found = frame.f_locals
    publisher, executor = found.get("self"), found.get("context")
    if not callable(getattr(publisher, "_handle_batch", None)) or not hasattr(executor, "hooks"):
        return None
    return publisher, executor


def _hooks(finished: Any) -> Any:
    from graphql.execution.executor import ExecutionHooks  # noqa: PLC0415  (3.3 only)

    return ExecutionHooks(async_work_finished=finished)


class _Follower:
    """One incremental operation: its data as the client assembles it, and its end."""

    def __init__(self, gate: Gate, op: Operation, initial: Any) -> None:
        self.gate = gate
        self.op = op
        self.loop = _running_loop()
        self.data = _Data(initial.data, initial.errors, initial.pending)
        self.payloads = 0
        self.settled = False

    def sent(self, payload: Any) -> None:
        """``payload`` (a ``SubsequentIncrementalExecutionResult``) goes to the client."""
        if self.settled:
            return
        self.payloads += 1
        self.data.add(payload)
        op, metrics = self.op, self.gate.metrics
        if metrics is not None:
            metrics.incremental.payload(op.tier.name)
        if op.span is not None:
            op.span.add_event(
                names.EVENT_INCREMENTAL_PAYLOAD,
                {names.ATTR_PAYLOAD: self.payloads,
                 names.ATTR_PAYLOAD_PARTS: len(payload.incremental or ())},
            )  # fmt: skip
        if not payload.has_next:  # the last: settled before it is handed over, to show it
            self.settle(None)
            cost = self.gate.results(op)
            if cost:
                payload.extensions = {**(payload.extensions or {}), **cost}

    def closed(self) -> None:
        """The stream closed (or was collected unread): settle, if the last payload did
        not. Called from graphql-core's cleanup or a finalizer: on the loop, or from it."""
        if self.settled:
            return
        loop = self.loop
        if loop is not None and _running_loop() is not loop:
            if not loop.is_closed():
                with contextlib.suppress(RuntimeError):  # closing meanwhile
                    loop.call_soon_threadsafe(self.closed)
                    return
            self._abandon()
            self._finish()
            return
        self._abandon()
        self.settle([_LEFT])

    def _abandon(self) -> None:
        op, metrics = self.op, self.gate.metrics
        if metrics is not None:
            metrics.incremental.ended(op.tier.name, names.INCREMENTAL_ABANDONED)
        if op.span is not None:
            op.span.add_event(
                names.EVENT_INCREMENTAL_ABANDONED, {names.ATTR_PAYLOAD: self.payloads}
            )

    def settle(self, left: Sequence[GraphQLError] | None) -> None:
        """Settle once: from the data sent (``left``: the client left, the whole debit
        kept), then record the operation. The storage's calls are made now as far as they
        answer at once; an async storage's rest by a task of the loop."""
        if self.settled:
            return
        self.settled = True
        op, gate = self.op, self.gate
        if left is None:
            metrics = gate.metrics
            if metrics is not None:
                metrics.incremental.ended(op.tier.name, names.INCREMENTAL_COMPLETED)
        errors = list(left) if left is not None else self.data.errors or None
        # Gate.settle's flow, driven as Gate drives it, here on either colour of storage.
        flow = gate._settle(op, self.data.data, errors)
        throws = (Exception,) if gate.is_async else ()
        try:
            pending = drive(flow, gate._step, throws)
        except BaseException:
            self._finish()
            raise
        if not is_pending(pending):
            self._finish()
            return
        task = asyncio.get_running_loop().create_task(self._later(pending))
        _settling.add(task)
        task.add_done_callback(_settling.discard)

    async def _later(self, pending: Any) -> None:
        try:
            await pending
        finally:
            self._finish()

    def _finish(self) -> None:
        self.settled = True
        _followed.pop(self.op, None)
        self.gate.finish(self.op)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class _Data:
    """An incremental operation's data as the client assembles it: the initial data, each
    deferred fragment's merged in where it belongs, each streamed list's items appended;
    the errors of every payload. The payloads' own objects are never changed (a container
    on a path merged into is copied once)."""

    def __init__(self, data: Any, errors: Sequence[GraphQLError] | None, pending: Any) -> None:
        self.data = data
        self.errors: list[GraphQLError] = list(errors or ())
        self._paths: dict[str, list[str | int]] = {}
        self._owned: set[int] = set()  # the containers copied here (the tree holds them)
        self._pending(pending)

    def _pending(self, pending: Any) -> None:
        for each in pending or ():
            self._paths[each.id] = list(each.path)

    def add(self, payload: Any) -> None:
        """Merge one subsequent payload."""
        self._pending(payload.pending)
        for part in payload.incremental or ():
            path = self._paths.get(part.id)
            if path is None:
                continue
            where = [*path, *(part.sub_path or ())]
            if part.errors:
                self.errors.extend(part.errors)
            items = getattr(part, "items", None)
            if items is not None:
                found = self._at(where)
                if isinstance(found, list):
                    found.extend(items)
            else:
                self._merge(where, part.data)
        for completed in payload.completed or ():
            if completed.errors:
                self.errors.extend(completed.errors)
            self._paths.pop(completed.id, None)

    def _own(self, value: Any) -> Any:
        """``value`` as a container of this tree's own (copied once), or as it is."""
        if id(value) in self._owned or not isinstance(value, dict | list):
            return value
        copy: dict[str, Any] | list[Any] = dict(value) if isinstance(value, dict) else list(value)
        self._owned.add(id(copy))
        return copy

    def _at(self, path: Sequence[str | int]) -> Any:
        """The container at ``path``, owned along the way (None: not there, or erased)."""
        here = self.data = self._own(self.data)
        for key in path:
            if not _holds(here, key):
                return None
            child = here[key] = self._own(here[key])
            here = child
        return here

    def _merge(self, path: Sequence[str | int], data: Any) -> None:
        target = self._at(path)
        if isinstance(target, dict) and isinstance(data, dict):
            self._into(target, data)

    def _into(self, target: dict[str, Any], data: dict[str, Any]) -> None:
        for key, value in data.items():
            here = target.get(key)
            if isinstance(here, dict) and isinstance(value, dict):
                owned = target[key] = self._own(here)
                self._into(owned, value)
            else:
                target[key] = value


def _holds(container: Any, key: str | int) -> bool:
    """``container`` (a response's object or list) has ``key`` (a response key, an index)."""
    if isinstance(container, dict):
        return isinstance(key, str) and key in container
    return isinstance(container, list) and isinstance(key, int) and 0 <= key < len(container)
