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
import sys
import weakref
from typing import TYPE_CHECKING, Any

from graphql import ExecutionResult, GraphQLError
from strawberry.extensions import SchemaExtension
from strawberry.types.graphql import OperationType

from quotaql import web
from quotaql.contract import OWN_REFUSALS, QuotaqlGraphQLError
from quotaql.gate import (
    Adapter,
    Gate,
    Operation,
    close_scope,
    current_operation,
    incremental,
    open_scope,
    timing,
    worktime,
)
from quotaql.identity import ANONYMOUS
from quotaql.policy.modes import Mode

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from strawberry.utils.await_maybe import AsyncIteratorOrIterator

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
        ({'hello': 'world'}, 0)

    Every keyword but ``quiet_logs`` and ``gate`` configures the
    :class:`~quotaql.gate.Gate` (see there): ``config``, ``storage`` (an
    ``AsyncRedisStorage`` works with ``schema.execute`` only, not ``execute_sync``),
    ``identify``, ``key_resolver``, ``principal``, ``tier_resolver``, ``metrics``,
    ``tracer_provider``, ``log``, ``recorder``, ``breaker``, ``config_path``, ``pressure``,
    ``leases``. With a Redis storage, wrap the ASGI app in :class:`quotaql.asgi.Lifespan` so
    that the refunds still waiting at shutdown are applied.

    Args:
        quiet_logs: drop the log record Strawberry (the ``strawberry.execution`` logger)
            and Django (``django.request``: "Too Many Requests: /graphql") write for each
            refusal quotaql answers: quotaql logs them itself, rate-limited, so that a flood
            of refused requests cannot flood the logs.
        gate: a gate built already (then no other keyword but ``quiet_logs``).
    """

    def _ready(self) -> None:
        # What __call__ chose for the configuration in force and whether Django was loaded:
        # (config, django, the class on an event loop, the class off one).
        self._chosen: tuple[object, bool, type[_Extension], type[_Extension]] | None = None
        if self.quiet_logs:
            logging.getLogger("strawberry.execution").addFilter(OWN_REFUSALS)  # idempotent

    def __call__(self) -> SchemaExtension:
        """A fresh extension for one request (Strawberry calls this).

        The async hooks on an event loop (``schema.execute``) when identifying may have to
        await (an async hook; Django's ``request.auser()`` in an async view); for an async
        storage, async hooks only where the storage is called on every request (execution,
        subscription events); for a sync storage on an event loop whose configuration has a
        delay tier (``on_limit = "delay"``), execution awaited, so that its operations wait
        for their turn (run sync, they would be refused as a sync server's); else the sync
        hooks, which cost Strawberry less (each async hook costs it ~20 µs a request).
        The choice is made again when the configuration changes or Django is loaded.
        """
        gate = self.gate
        config = gate.config
        django = "django" in sys.modules
        chosen = self._chosen
        if chosen is None or chosen[0] is not config or chosen[1] is not django:
            chosen = self._chosen = (config, django, *self._choose(config))
        on_loop, off_loop = chosen[2], chosen[3]
        chosen_class = off_loop if on_loop is not off_loop and not _on_event_loop() else on_loop
        timer = timing.sample(gate)  # sampled for tuning: its resolvers timed (else None)
        if timer is None:
            return chosen_class(gate, quiet=self.quiet_logs)
        extension = _timed(chosen_class)(gate, quiet=self.quiet_logs)
        extension._timer = timer
        return extension

    def _choose(self, config: Config) -> tuple[type[_Extension], type[_Extension]]:
        """The extension's class on an event loop, and off one, under ``config``."""
        gate = self.gate
        delays = any(tier.delays for tier in config.tiers.values())
        off_loop = _Extension if gate.is_async else _SyncExtension
        if gate.identity.may_await():
            return _AsyncExtension, off_loop
        if gate.is_async:
            return _Extension, _Extension
        return (_DelayingExtension if delays else _SyncExtension), _SyncExtension


class _Extension(SchemaExtension):
    """One request's hooks, each in the colour an async storage needs; a leaf recolours
    only the hooks whose colour differs (Strawberry calls a hook sync or awaits it as the
    function is written).

    The hooks, in Strawberry's order: ``on_operation`` identifies who pays (the deny cache
    may refuse at once); ``on_parse`` answers that refusal before anything is parsed, and
    parses within the parser limits; ``on_validate`` runs the static pass before
    Strawberry's validation (refused documents are never validated) and charges a document
    that fails either; ``on_execute`` prices and debits, then refunds; ``on_operation``
    records the operation when it ends (a subscription's, when its stream closes).

    As it is, for an async storage and an identity that never awaits: the hooks before
    execution stay sync (the common request calls no storage there), execution and
    subscription events are awaited (the storage is called on each), and a document refused
    before it was priced is charged by a task once the operation ends.
    :class:`_SyncExtension` (a sync storage) runs execution and events sync and charges at
    once; :class:`_AsyncExtension` (an identity that may await) awaits every hook.
    """

    def __init__(self, gate: Gate, *, quiet: bool = True) -> None:
        super().__init__()
        self._gate = gate
        self._quiet = quiet
        self._op: Operation | None = None

    _timer: timing.ResolverTimer | None = None
    """A sampled request's timer (:func:`_timed`'s class): its resolvers timed."""

    def get_results(self) -> dict[str, Any]:
        return self._gate.results(self._op)

    # -- the hooks -------------------------------------------------------------------------

    def on_operation(self) -> Iterator[None]:
        # A subscription lives until its stream closes, long after on_execute: this is
        # where every operation ends (normally, cancelled, refused or by its client).
        op = self._begun(self._gate.begin(context=self.execution_context.context))
        try:
            yield
        finally:
            self._ended(op)

    def on_parse(self) -> Iterator[None]:
        op = self._op
        if op is not None and op.refused:
            if op.failed and op.unpaid:  # the request itself refused (a bad GraphQL-Cost)
                self._unpriced(op, op.errors)
            self._refused_early(op)
        error = self._parse()
        if error is not None and op is not None:
            self._unpriced(op, [error])
            raise error
        yield

    def on_validate(self) -> Iterator[None]:
        op = self._op
        known = self._known(op)
        if not known and op is not None and self._screen(op) is not None:
            self._unpriced(op, op.errors)
            self._refused(op)
        yield
        self._validated(op, known)
        errors = self._invalid(op) if op is not None else None
        if errors and op is not None:
            self._unpriced(op, errors)

    # Typed as SchemaExtension types its hooks (either colour): _SyncExtension's are sync.
    async def on_execute(self) -> AsyncIteratorOrIterator[None]:
        gate, ctx = self._gate, self.execution_context
        scope = open_scope()  # (operation_scope's work, without a context manager's calls)
        try:
            op = await gate.admit_async(ctx.schema, ctx.graphql_document, ctx.variables,
                                        ctx.operation_name, context=ctx.context,
                                        op=self._op)  # fmt: skip
            self._admitted(op)
            yield
            ran = self._ran(op)
            if ran is not None:
                await gate.settle_async(op, *ran)
            self._answered(op)
        finally:
            close_scope(scope)

    async def on_stream_result(self, result: Any) -> AsyncIteratorOrIterator[None]:
        op = self._op
        if op is not None and op.operation_type == "subscription":
            error = await self._gate.event_async(op)
            if error is not None:
                raise error  # ends the subscription with this error as its last payload
            self._charged(result, op)
        yield

    # -- charges before pricing ------------------------------------------------------------

    def _unpriced(self, op: Operation, errors: list[GraphQLError]) -> None:
        """A document refused before pricing: ``min_charge`` for it, charged when the
        operation ends (a sync hook cannot await the storage)."""
        self._gate.fail(op, errors)

    def _ended(self, op: Operation) -> None:
        """The operation ended: charge what it owes (by a task), then record it."""
        unreached = self._unreached(op)
        if unreached is not None:
            self._gate.fail(op, unreached)
        if op.failed and op.unpaid and op.mode is not Mode.OFF:
            _charging.add(asyncio.get_running_loop().create_task(_charge(self._gate, op)))
        else:
            self._finish(op)

    # -- what the hooks of every colour share ----------------------------------------------

    def _begun(self, op: Operation) -> Operation:
        """``op`` as this request's operation; the schema's extensions checked, once."""
        self._op = op
        timing.attach(op, self._timer)
        schema = self.execution_context.schema
        if schema not in _checked_schemas:
            _checked_schemas.add(schema)
            _check_extensions(self._gate, schema)
        return op

    def _refused_early(self, op: Operation) -> None:
        """Answer a refusal made before parsing (the deny cache): no document is parsed."""
        ctx = self.execution_context
        self._gate.respond(op, web.response_of(ctx.context))
        if self._quiet and op.status is not None:
            web.quiet_refusal(web.request_of(ctx.context))
        raise op.errors[0]

    def _parse(self) -> GraphQLError | None:
        """Parse here (once), within the parser limits: the error to charge, if any. The
        worker time of parsing, the static pass and validation is measured from here to
        :meth:`_validated` (a parse error stops it at once)."""
        ctx = self.execution_context
        op = self._op
        if op is not None:
            worktime.start(op.work)
        if ctx.graphql_document is None and ctx.query:
            try:
                ctx.graphql_document = self._gate.parse_document(ctx.query, op=op)
            except GraphQLError as error:
                if op is not None:
                    worktime.stop(op.work)
                return error
        return None

    def _known(self, op: Operation | None) -> bool:
        """Whether the document passed the static pass and Strawberry's validation (with
        the rules in force) before: then neither runs again (Strawberry validates only
        while ``pre_execution_errors`` is None)."""
        ctx = self.execution_context
        document = ctx.graphql_document
        if (
            op is None
            or document is None
            or ctx.pre_execution_errors is not None
            or not ctx.validation_rules
            or not self._gate.known(op, ctx.schema, document, ctx.validation_rules)
        ):
            return False
        ctx.pre_execution_errors = []
        return True

    def _validated(self, op: Operation | None, known: bool) -> None:
        """Validation ended: the worker time measured since :meth:`_parse` is ``op``'s; a
        document Strawberry found valid is known from now on (if the static pass found
        nothing)."""
        if op is None:
            return
        worktime.stop(op.work)
        ctx = self.execution_context
        document = ctx.graphql_document
        if not known and ctx.pre_execution_errors == [] and document is not None:
            self._gate.checked(op, ctx.schema, document, ctx.validation_rules)

    def _screen(self, op: Operation) -> GraphQLError | None:
        """The static pass, before Strawberry validates (which it then does not)."""
        document = self.execution_context.graphql_document
        if document is None:
            return None
        return self._gate.screen(op, document)

    def _invalid(self, op: Operation) -> list[GraphQLError] | None:
        """The errors Strawberry's validation found, to charge (once)."""
        errors = self.execution_context.pre_execution_errors
        return list(errors) if errors and not op.failed else None

    def _unreached(self, op: Operation) -> list[GraphQLError] | None:
        """A parsed document that never reached pricing without being refused by quotaql
        (Strawberry found no operation of that name, or that type is not allowed here):
        what to charge ``min_charge`` for, once the operation ends."""
        if (
            not op.unpaid
            or op.error is not None
            or op.mode is Mode.OFF
            or self.execution_context.graphql_document is None
        ):
            return None
        return [_UNREACHED]

    def _refused(self, op: Operation) -> None:
        """The static pass refused: Strawberry answers the error and skips validation."""
        self.execution_context.pre_execution_errors = op.errors

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
            ctx.result = ExecutionResult(data=None)  # priced, not run: it paid the minimum

    def _charged(self, result: Any, op: Operation) -> None:
        """An event's ``extensions.cost`` after its charge (Strawberry built it before)."""
        cost = self._gate.results(op)
        if cost:
            result.extensions = {**(getattr(result, "extensions", None) or {}), **cost}

    def _ran(self, op: Operation) -> tuple[Any, list[GraphQLError] | None] | None:
        """What execution returned, its data and errors (an error's erasure is charged),
        when ``op`` is to be settled now: it ran, and all of it has. ``@defer`` /
        ``@stream`` deliver the rest after this hook: their payloads are followed, and
        the operation settled once the last is sent or the client left
        (:mod:`quotaql.gate.incremental`)."""
        result = self.execution_context.result
        if not op.runs:
            return None
        if result.__class__ is not ExecutionResult and incremental.is_incremental(result):
            incremental.follow(self._gate, op, result)
            return None
        return getattr(result, "data", None), getattr(result, "errors", None)

    def _finish(self, op: Operation) -> None:
        """Record ``op`` as the request ends, unless its ``@defer`` / ``@stream``
        payloads are still on their way (it is recorded once they are settled)."""
        if not incremental.following(op):
            self._gate.finish(op)

    def _answered(self, op: Operation) -> None:
        """After execution: status and headers on the response, unless it was refused."""
        if op.error is None:
            self._gate.respond(op, web.response_of(self.execution_context.context))


# What a parsed document that Strawberry did not run is charged as (the client's answer is
# Strawberry's own: an unknown operation name, an operation type not allowed).
_UNREACHED = QuotaqlGraphQLError(
    "The document names no operation that could run.",
    extensions={"code": "OPERATION_RESOLUTION_FAILURE"},
)


# Strawberry's extensions whose work quotaql does, within its limits: what each does there.
_UNLIMITED_EXTENSIONS = {
    "ParserCache": "parses every new document in full, whatever its size",
    "ValidationCache": "validates every document, a hostile one in full, even one the static"
    " pass refused",
}
_checked_schemas: weakref.WeakSet[Any] = weakref.WeakSet()


def _check_extensions(gate: Gate, schema: Any) -> None:
    """Say (once per schema) that an extension beside the limiter does again, outside its
    limits, what the limiter does: keep parsed documents and validation results."""
    found = sorted(
        name
        for extension in getattr(schema, "extensions", ())
        if (name := getattr(extension, "__name__", type(extension).__name__))
        in _UNLIMITED_EXTENSIONS
    )
    if found:
        gate.log.log(
            logging.ERROR,
            "unlimited_extension",
            "quotaql: %s on this schema is not needed: quotaql keeps parsed documents and"
            " validates each document once, within the [cost] limits; %s. Remove it"
            " (docs/strawberry.md)",
            " and ".join(found),
            "; ".join(f"{name} {_UNLIMITED_EXTENSIONS[name]}" for name in found),
        )


class _Timing:
    """The ``resolve`` of a request sampled for tuning: Strawberry makes graphql-core
    middleware of the extensions that implement ``resolve``, per request, so only this
    request's resolvers are wrapped (:mod:`quotaql.gate.timing`)."""

    _timer: timing.ResolverTimer | None

    def resolve(self, _next: Any, root: Any, info: Any, *args: Any, **kwargs: object) -> Any:
        timer = self._timer
        if timer is None:  # pragma: no cover  (set as the extension is made)
            return _next(root, info, *args, **kwargs)
        return timer.resolve(_next, root, info, *args, **kwargs)


_timed_classes: dict[type[_Extension], type[_Extension]] = {}


def _timed(cls: type[_Extension]) -> type[_Extension]:
    """``cls`` with :class:`_Timing`'s ``resolve`` (made once per class)."""
    timed = _timed_classes.get(cls)
    if timed is None:
        timed = _timed_classes[cls] = type(f"_Timed{cls.__name__}", (_Timing, cls), {})
    return timed


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


# The charges of refused documents under way (a task nobody holds may be collected).
_charging: set[asyncio.Task[None]] = set()


async def _charge(gate: Gate, op: Operation) -> None:
    """Charge ``[limits] min_charge`` for a document refused before pricing, then record it."""
    try:
        await gate.reject_async(op, op.errors)
    finally:
        gate.finish(op)
        task = asyncio.current_task()
        if task is not None:
            _charging.discard(task)


class _SyncExtension(_Extension):
    """A sync storage: execution and subscription events sync, and a document refused
    before it was priced charged at once."""

    def on_execute(self) -> Iterator[None]:
        gate, ctx = self._gate, self.execution_context
        scope = open_scope()
        try:
            op = gate.admit(ctx.schema, ctx.graphql_document, ctx.variables,
                            ctx.operation_name, context=ctx.context, op=self._op)  # fmt: skip
            self._admitted(op)
            yield
            ran = self._ran(op)
            if ran is not None:
                gate.settle(op, *ran)
            self._answered(op)
        finally:
            close_scope(scope)

    def on_stream_result(self, result: Any) -> Iterator[None]:
        op = self._op
        if op is not None and op.operation_type == "subscription":
            error = self._gate.event(op)
            if error is not None:
                raise error  # ends the subscription with this error as its last payload
            self._charged(result, op)
        yield

    def _unpriced(self, op: Operation, errors: list[GraphQLError]) -> None:
        self._gate.reject(op, errors)

    def _ended(self, op: Operation) -> None:
        unreached = self._unreached(op)
        if unreached is not None:
            self._gate.reject(op, unreached)
        self._finish(op)


class _DelayingExtension(_SyncExtension):
    """A sync storage (the default ``MemoryStorage``, ``RedisStorage``) on an event loop,
    with delay tiers: execution awaited, so that an operation of a delay tier waits for its
    turn with ``asyncio.sleep`` (the storage's calls stay plain calls); run sync, it would
    be decided as a sync server's (``[limits] delay_sync``: refused). The other hooks are
    :class:`_SyncExtension`'s."""

    # _Extension's, awaited by Strawberry (a hook written async is awaited, whatever its
    # base's colour); mypy takes the other colour for an incompatible override.
    on_execute = _Extension.on_execute  # type: ignore[assignment]


class _AsyncExtension(_Extension):
    """An identity that may await (an async hook; Django's ``request.auser()``): the hooks
    before execution awaited too, and a document refused before pricing charged at once.

    Each hook here is the async twin of a sync one, which mypy takes for an incompatible
    override: Strawberry awaits a hook written ``async``, whatever its base's colour.
    """

    async def on_operation(self) -> AsyncIterator[None]:  # type: ignore[override]
        op = self._begun(await self._gate.begin_async(context=self.execution_context.context))
        try:
            yield
        finally:
            unreached = self._unreached(op)
            if unreached is not None:
                await self._gate.reject_async(op, unreached)
            self._finish(op)

    async def on_parse(self) -> AsyncIterator[None]:  # type: ignore[override]
        op = self._op
        if op is not None and op.refused:
            if op.failed and op.unpaid:  # the request itself refused (a bad GraphQL-Cost)
                await self._gate.reject_async(op, op.errors)
            self._refused_early(op)
        error = self._parse()
        if error is not None and op is not None:
            await self._gate.reject_async(op, [error])
            raise error
        yield

    async def on_validate(self) -> AsyncIterator[None]:  # type: ignore[override]
        op = self._op
        known = self._known(op)
        if not known and op is not None and self._screen(op) is not None:
            await self._gate.reject_async(op, op.errors)
            self._refused(op)
        yield
        self._validated(op, known)
        errors = self._invalid(op) if op is not None else None
        if errors and op is not None:
            await self._gate.reject_async(op, errors)
