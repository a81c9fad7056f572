"""The Strawberry schema extension: a thin adapter over :class:`quotaql.gate.Gate`.

``CostLimiter`` is configured once and holds the gate (the config, the limiter and its
storage, the identity hooks); Strawberry calls it for every request and gets a fresh
extension object, whose hooks tell the gate's story for one operation: admit it (identify,
price, debit) before execution, refuse it or let it run, settle it (refund) after, answer
(status, headers, ``extensions.cost``) and record it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from graphql import ExecutionResult
from strawberry.extensions import SchemaExtension
from strawberry.types.graphql import OperationType

from quotaql import web
from quotaql.contract import OWN_REFUSALS
from quotaql.gate import Adapter, Gate, Operation, current_operation, operation_scope
from quotaql.identity import ANONYMOUS

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from quotaql.config import Config


__all__ = ["ANONYMOUS", "CostLimiter", "current_operation"]


class CostLimiter(Adapter):
    """Cost-based rate limiting for a Strawberry schema: ``extensions=[CostLimiter(...)]``.

    Example:
        >>> import strawberry
        >>> @strawberry.type
        ... class Query:
        ...     @strawberry.field
        ...     def hello(self) -> str:
        ...         return "world"
        >>> schema = strawberry.Schema(query=Query, extensions=[CostLimiter()])
        >>> result = schema.execute_sync("{ hello }")
        >>> result.data, result.extensions["cost"]["requestedQueryCost"]
        ({'hello': 'world'}, 0.0)

    Every keyword but ``quiet_logs`` and ``gate`` configures the
    :class:`~quotaql.gate.Gate` (see there): ``config``, ``storage`` (an
    ``AsyncRedisStorage`` works with ``schema.execute`` only, not ``execute_sync``),
    ``identify``, ``key_resolver``, ``principal``, ``tier_resolver``, ``metrics``,
    ``tracer_provider``, ``log``, ``recorder``, ``breaker``, ``config_path``.

    Args:
        quiet_logs: drop the log record Strawberry (the ``strawberry.execution`` logger)
            and Django (``django.request``: "Too Many Requests: /graphql") write for each
            refusal quotaql answers: quotaql logs them itself, rate-limited, so that a flood
            of refused requests cannot flood the logs.
        gate: a gate built already (then no other keyword but ``quiet_logs``).
    """

    def __init__(
        self,
        config: Config | None = None,
        *,
        quiet_logs: bool = True,
        gate: Gate | None = None,
        **options: Any,
    ) -> None:
        super().__init__(config, quiet_logs=quiet_logs, gate=gate, **options)
        if quiet_logs:
            logging.getLogger("strawberry.execution").addFilter(OWN_REFUSALS)  # idempotent

    def __call__(self) -> SchemaExtension:
        """A fresh extension for one request (Strawberry calls this).

        The async hooks for an async storage, and on an event loop (``schema.execute``)
        when identifying may have to await (an async hook; Django's ``request.auser()`` in
        an async view); else the sync hooks, which cost Strawberry less.
        """
        gate = self.gate
        limits = gate.config.cost.limits
        parsing = limits.max_tokens is not None or limits.max_length is not None
        if gate.is_async or (gate.identity.may_await() and _on_event_loop()):
            kind: type[_Extension] = _AsyncParsingExtension if parsing else _AsyncExtension
        else:
            kind = _SyncParsingExtension if parsing else _SyncExtension
        return kind(gate, quiet=self.quiet_logs)


class _Extension(SchemaExtension):
    """What the sync and async extensions share: everything but the gate calls' colour."""

    def __init__(self, gate: Gate, *, quiet: bool = True) -> None:
        super().__init__()
        self._gate = gate
        self._quiet = quiet
        self._op: Operation | None = None

    def on_operation(self) -> Iterator[None]:
        # A subscription lives until its stream closes, long after on_execute: this is
        # where it ends (normally, cancelled, or by its client) and frees its slot.
        try:
            yield
        finally:
            op = self._op
            if op is not None and op.operation_type == "subscription":
                self._gate.finish(op)

    def get_results(self) -> dict[str, Any]:
        return self._gate.results(self._op)

    def _admitted(self, op: Operation) -> None:
        """Refuse (or validate without running) before execution."""
        ctx = self.execution_context
        self._op = op
        if op.error is not None:
            self._gate.respond(op, web.response_of(ctx.context))
            if self._quiet and op.status is not None:
                web.quiet_refusal(web.request_of(ctx.context))
            if ctx.operation_type is OperationType.SUBSCRIPTION:
                raise op.error  # Strawberry does not look at ctx.result before subscribing
            ctx.result = ExecutionResult(data=None, errors=[op.error])
        elif op.validate_only:
            ctx.result = ExecutionResult(data=None)  # priced, not run, nothing debited

    def _charged(self, result: Any, op: Operation) -> None:
        """An event's ``extensions.cost`` after its charge (Strawberry built it before)."""
        cost = self._gate.results(op)
        if cost:
            result.extensions = {**(getattr(result, "extensions", None) or {}), **cost}

    def _settles(self, op: Operation) -> bool:
        """Whether to settle ``op`` now: it ran, and all of it has (``@defer`` / ``@stream``
        deliver the rest after this hook: what ran is not known, nothing is refunded)."""
        result = self.execution_context.result
        return op.runs and not hasattr(result, "initial_result")

    def _data(self) -> Any:
        return getattr(self.execution_context.result, "data", None)

    def _answered(self, op: Operation) -> None:
        """After execution: status and headers on the response, unless it was refused."""
        if op.error is None:
            self._gate.respond(op, web.response_of(self.execution_context.context))

    def _done(self, op: Operation | None) -> None:
        if op is not None and op.operation_type != "subscription":
            self._gate.finish(op)

    def _admit_arguments(self) -> tuple[Any, ...]:
        ctx = self.execution_context
        return ctx.schema, ctx.graphql_document, ctx.variables, ctx.operation_name


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class _SyncExtension(_Extension):
    def on_execute(self) -> Iterator[None]:
        gate, ctx = self._gate, self.execution_context
        op = None
        with operation_scope():
            try:
                op = gate.admit(*self._admit_arguments(), context=ctx.context)
                self._admitted(op)
                yield
                if self._settles(op):
                    gate.settle(op, self._data())
                self._answered(op)
            finally:
                self._done(op)

    def on_stream_result(self, result: Any) -> Iterator[None]:
        op = self._op
        if op is not None and op.operation_type == "subscription":
            error = self._gate.event(op)
            if error is not None:
                raise error  # ends the subscription with this error as its last payload
            self._charged(result, op)
        yield


class _AsyncExtension(_Extension):
    async def on_execute(self) -> AsyncIterator[None]:
        gate, ctx = self._gate, self.execution_context
        op = None
        with operation_scope():
            try:
                op = await gate.admit_async(*self._admit_arguments(), context=ctx.context)
                self._admitted(op)
                yield
                if self._settles(op):
                    await gate.settle_async(op, self._data())
                self._answered(op)
            finally:
                self._done(op)

    async def on_stream_result(self, result: Any) -> AsyncIterator[None]:
        op = self._op
        if op is not None and op.operation_type == "subscription":
            error = await self._gate.event_async(op)
            if error is not None:
                raise error  # ends the subscription with this error as its last payload
            self._charged(result, op)
        yield


def _parse_with_limits(self: _Extension) -> Iterator[None]:
    """``on_parse`` with parser limits set: parse here (once) so they answer with their codes."""
    ctx = self.execution_context
    if ctx.graphql_document is None and ctx.query:
        ctx.graphql_document = self._gate.parse_document(ctx.query)
    yield


# Without parser limits there is no on_parse hook at all: Strawberry runs only the hooks an
# extension defines, and each costs it some work on every request.
class _SyncParsingExtension(_SyncExtension):
    on_parse = _parse_with_limits


class _AsyncParsingExtension(_AsyncExtension):
    on_parse = _parse_with_limits
