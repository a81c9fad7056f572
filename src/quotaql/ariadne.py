"""Ariadne glue: the :class:`CostLimiter` for ``ariadne.asgi.GraphQL`` and ``ariadne.wsgi``.

The :class:`~quotaql.gate.Gate` tells the story of each operation; this module only finds
Ariadne's places for it. Ariadne calls a callable ``root_value`` with ``(context,
operation_name, variables, document)`` after it parsed and validated the document and
before it executes it (``ariadne.graphql.graphql``, ``graphql_sync`` and ``subscribe``):
that is where the gate admits the operation, and a refusal raised there means no
resolver runs. The handlers' ``execute_graphql_query`` (ASGI) and ``execute_query``
(WSGI) see the result, so they settle the refund and add ``extensions.cost``; the ASGI
``handle_request`` and the WSGI ``start_response`` hold the response, so they write the
status and the rate-limit headers; the websocket handlers' ``observe_async_results``
holds a subscription's stream, so it charges each event.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import weakref
import wsgiref.headers
from http import HTTPStatus
from inspect import isawaitable
from typing import TYPE_CHECKING, Any, Literal, cast, overload

from ariadne.asgi import GraphQL as ASGIGraphQL
from ariadne.asgi.handlers import GraphQLHTTPHandler, GraphQLTransportWSHandler, GraphQLWSHandler
from ariadne.wsgi import GraphQL as WSGIGraphQL
from graphql import ExecutionResult, GraphQLError, OperationType
from graphql import validate as graphql_validate
from starlette.responses import JSONResponse

from quotaql import web
from quotaql.asgi import (
    InvalidBody,
    ScreenedWebSocket,
    ScreensBodies,
    charge_body,
    charge_body_async,
    reads_multipart,
    serve_lifespan,
)
from quotaql.contract import OWN_REFUSALS, QuotaqlGraphQLError
from quotaql.cost_analysis.analyzer import select_operation
from quotaql.errors import CostAnalysisError
from quotaql.gate import (
    Adapter,
    Gate,
    Operation,
    current_operation,
    operation_scope,
    timing,
    worktime,
)

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, Callable, Collection, Coroutine, Iterator
    from typing import Unpack

    from ariadne.asgi.handlers.graphql_transport_ws import ClientContext
    from ariadne.types import (
        GraphQLResult,
        QueryValidator,
    )
    from ariadne.types import Operation as AriadneOperation
    from graphql import ASTValidationRule, DocumentNode, GraphQLSchema
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.websockets import WebSocket

    from quotaql._ariadne_options import (
        _ASGIOptions,
        _EitherWebsocketOptions,
        _HTTPOptions,
        _TransportWSOptions,
        _WSGIOptions,
        _WSOptions,
    )


__all__ = [
    "CostLimitedHTTPHandler",
    "CostLimitedTransportWSHandler",
    "CostLimitedWSGI",
    "CostLimitedWSHandler",
    "CostLimiter",
    "current_operation",
]

WebsocketProtocol = Literal["graphql-transport-ws", "graphql-ws"]


class _Scope:
    """One operation inside a handler: its request, what the gate made of it, and whether
    a subscription stream took it over (and so finishes it when the stream ends)."""

    __slots__ = ("document", "loose", "op", "request", "streaming", "timer")

    def __init__(self, request: Any, *, loose: bool = False) -> None:
        self.request = request
        self.op: Operation | None = None
        self.document: DocumentNode | None = None  # what the parse hook parsed
        self.streaming = False
        self.loose = loose  # root_value was called outside the CostLimiter's handlers
        self.timer: timing.ResolverTimer | None = None  # sampled: its resolvers timed

    @property
    def running(self) -> Operation | None:
        """The operation, when it was let run (not refused, not only priced)."""
        op = self.op
        return op if op is not None and op.runs else None


# The operation being handled, set by the handlers around Ariadne's own code and read by
# the root value that Ariadne calls in between (it gets no handler argument).
_scope: contextvars.ContextVar[_Scope | None] = contextvars.ContextVar(
    "quotaql_ariadne_scope", default=None
)
# The operations that share the HTTP response being built (an Ariadne request carries one:
# it answers batches with an error).
_answer: contextvars.ContextVar[list[Operation] | None] = contextvars.ContextVar(
    "quotaql_ariadne_answer", default=None
)


class _Priced(QuotaqlGraphQLError):
    """Stops a ``GraphQL-Cost: validate`` operation before it runs; the handler answers
    ``{"data": null, "extensions": {"cost": ...}}`` in its place."""

    def __init__(self, extensions: dict[str, Any]) -> None:
        super().__init__("Priced, not run: the request asked GraphQL-Cost: validate.",
                         extensions=extensions)  # fmt: skip


def _quiet(logger: Any) -> None:
    """Put the filter on the logger Ariadne's ``logger`` option names (default ``ariadne``)."""
    if logger is None or isinstance(logger, str):
        logger = logging.getLogger(logger or "ariadne")
    logger = getattr(logger, "logger", logger)  # a LoggerAdapter
    if isinstance(logger, logging.Logger):
        logger.addFilter(OWN_REFUSALS)  # idempotent


class CostLimiter(Adapter):
    """Cost-based rate limiting for an Ariadne server, over HTTP (ASGI or WSGI) and websockets.

    Example:
        >>> import io, json
        >>> from ariadne import make_executable_schema
        >>> schema = make_executable_schema("type Query { hello: String }")
        >>> app = CostLimiter().wsgi(schema)  # ariadne.wsgi.GraphQL, limited
        >>> body = json.dumps({"query": "{ hello }"}).encode()
        >>> environ = {"REQUEST_METHOD": "POST", "CONTENT_TYPE": "application/json",
        ...            "CONTENT_LENGTH": str(len(body)), "wsgi.input": io.BytesIO(body),
        ...            "REMOTE_ADDR": "203.0.113.9"}
        >>> answer = {}
        >>> chunks = app(environ, lambda status, headers: answer.update(headers, status=status))
        >>> answer["status"], answer["RateLimit-Policy"]
        ('200 OK', '"tenant";q=1000;w=20')
        >>> json.loads(b"".join(chunks))["extensions"]["cost"]["requestedQueryCost"]
        0

    On ASGI, give ``ariadne.asgi.GraphQL`` both handlers (or call :meth:`asgi`)::

        limiter = CostLimiter.from_config("quotaql.toml", storage=AsyncRedisStorage(...))
        app = GraphQL(schema, http_handler=limiter.http_handler(),
                      websocket_handler=limiter.websocket_handler())

    Every keyword but ``quiet_logs`` and ``gate`` configures the
    :class:`~quotaql.gate.Gate` (see there): ``config``, ``storage`` (an
    ``AsyncRedisStorage`` works on ASGI only), ``identify``, ``key_resolver``,
    ``principal``, ``tier_resolver``, ``metrics``, ``tracer_provider``, ``log``,
    ``recorder``, ``breaker``, ``config_path``, ``pressure``, ``leases``. The hooks get
    Ariadne's context value; the default identity reads the request Ariadne handles
    (Starlette's ``Request`` or ``WebSocket``, or the WSGI environ), whatever the context
    holds.

    Args:
        quiet_logs: drop Ariadne's own log record of each refusal quotaql answers (a
            filter on the logger of Ariadne's ``logger`` option, default ``ariadne``):
            quotaql logs them itself, rate-limited.
        gate: a gate built already (then no other keyword but ``quiet_logs``).
    """

    def _ready(self) -> None:
        # The subscriptions whose stream has been handed to Ariadne, by Ariadne's generator:
        # a stream stopped before its task ever ran must still be finished once.
        self._streams: weakref.WeakKeyDictionary[Any, _Subscription] = weakref.WeakKeyDictionary()
        self._warned_loose = False

    # -- what the application is given --------------------------------------------------

    def http_handler(self, **options: Unpack[_HTTPOptions]) -> CostLimitedHTTPHandler:
        """An ``ariadne.asgi.handlers.GraphQLHTTPHandler`` (same ``options``) that limits."""
        return CostLimitedHTTPHandler(self, **options)

    @overload
    def websocket_handler(
        self,
        *,
        protocol: Literal["graphql-transport-ws"] = ...,
        **options: Unpack[_TransportWSOptions],
    ) -> CostLimitedTransportWSHandler: ...
    @overload
    def websocket_handler(
        self, *, protocol: Literal["graphql-ws"], **options: Unpack[_WSOptions]
    ) -> CostLimitedWSHandler: ...
    def websocket_handler(
        self,
        *,
        protocol: WebsocketProtocol = "graphql-transport-ws",
        **options: Unpack[_EitherWebsocketOptions],
    ) -> CostLimitedTransportWSHandler | CostLimitedWSHandler:
        """A websocket handler for ``protocol`` (``options`` as Ariadne's) that limits."""
        if protocol == "graphql-transport-ws":
            return CostLimitedTransportWSHandler(self, **cast("_TransportWSOptions", options))
        if protocol == "graphql-ws":
            return CostLimitedWSHandler(self, **cast("_WSOptions", options))
        raise ValueError(f"unknown websocket protocol {protocol!r}")

    def asgi(
        self,
        schema: GraphQLSchema,
        *,
        websocket_protocol: WebsocketProtocol = "graphql-transport-ws",
        **options: Unpack[_ASGIOptions],
    ) -> ASGIGraphQL:
        """``ariadne.asgi.GraphQL(schema, **options)`` with this limiter's two handlers; it
        answers ASGI lifespan events too, and at shutdown applies the refunds and lease
        releases still waiting (:meth:`~quotaql.gate.Gate.aflush`)."""
        return _LimitedASGI(
            self.gate,
            schema,
            http_handler=self.http_handler(),
            websocket_handler=self.websocket_handler(protocol=websocket_protocol),
            **options,
        )

    def wsgi(self, schema: GraphQLSchema, **options: Unpack[_WSGIOptions]) -> CostLimitedWSGI:
        """``ariadne.wsgi.GraphQL(schema, **options)``, limited."""
        return CostLimitedWSGI(self, schema, **options)

    # -- what the handlers share ------------------------------------------------------------

    def _install(self, target: Any, *, is_async: bool) -> None:
        """Wrap a configured handler's (or WSGI app's) root value; parse within limits."""
        admission = _AsyncAdmission if is_async else _SyncAdmission
        if not isinstance(target.root_value, _Admission):  # configured again: wrapped once
            target.root_value = admission(self, target, target.root_value)
        if target.query_parser is None:
            target.query_parser = self._parse
        if not isinstance(target.query_validator, _Validator):
            target.query_validator = _Validator(self.gate, target.query_validator)
        if self.quiet_logs:
            _quiet(target.logger)

    def _parse(self, context: Any, data: dict[str, Any]) -> DocumentNode:
        """Ariadne's ``query_parser``: a subject the deny cache refuses is answered before
        anything is parsed; the parser limits of ``[cost]`` answer their codes (the static
        pass runs in the ``query_validator``, :class:`_Validator`). The handler charges
        ``[limits] min_charge`` for a refusal here (this hook cannot await)."""
        gate = self.gate
        scope = _scope.get()
        if (
            scope is not None
            and scope.op is None
            and scope.request is not None
            and not gate.identity.may_await(scope.request)
        ):  # the WSGI app, a websocket's subscription: begun here, before parsing
            scope.op = gate.begin(context=context, request=scope.request)
        op = scope.op if scope is not None else None
        if op is not None and op.refused:
            raise op.errors[0]
        if op is not None:  # parsing to validation (Ariadne's): measured up to admission
            worktime.start(op.work)
        try:
            document = gate.parse_document(data["query"], op=op)
        except GraphQLError as error:
            if op is not None:
                worktime.stop(op.work)
                gate.fail(op, [error])
            raise
        if scope is not None:
            scope.document = document
        return document

    async def _charge_unpriced(self, scope: _Scope, data: Any) -> None:
        """A websocket message's operation that Ariadne answered without running: its
        document did not parse, pass the static pass or validate, or names no operation.
        Charge ``[limits] min_charge`` for it; a query or mutation is the HTTP handler's."""
        op = scope.op
        if op is None or not op.unpaid:
            return
        if not op.failed:
            name = data.get("operationName") if isinstance(data, dict) else None
            if scope.document is None or _runs_over_http(scope.document, name):
                return
            self.gate.fail(op, [QuotaqlGraphQLError(
                "The subscription was refused before it could be priced.",
                extensions={"code": _INVALID},
            )])  # fmt: skip
        await self.gate.reject_async(op, op.errors)

    @staticmethod
    def _unpriced(scope: _Scope, result: dict[str, Any]) -> list[GraphQLError] | None:
        """What to charge ``min_charge`` for: a document refused before it was priced (by
        the parse hook, or by Ariadne's validation), once."""
        op = scope.op
        if op is None or not op.unpaid:
            return None
        if op.failed:
            return op.errors
        if result.get("errors"):  # Ariadne's validation refused it: nothing ran
            first = result["errors"][0]
            message = first.get("message", "invalid") if isinstance(first, dict) else str(first)
            return [QuotaqlGraphQLError(message, extensions={"code": _INVALID})]
        return None

    @contextlib.contextmanager
    def _operation(self, request: Any) -> Iterator[_Scope]:
        """The scope of one operation: recorded when it ends, unless a stream took it."""
        scope = _Scope(request)
        token = _scope.set(scope)
        try:
            with operation_scope():
                yield scope
        finally:
            _scope.reset(token)
            if not scope.streaming:
                self.gate.finish(scope.op)

    def _admitted(self, scope: _Scope, op: Operation) -> None:
        """After the gate's admission: keep it, and refuse (or only price) by raising."""
        scope.op = op
        if scope.loose:
            self._loose(op)
        if op.error is not None:
            raise op.error  # Ariadne answers it as a request error: nothing runs
        if op.validate_only:
            raise _Priced(self.gate.results(op))

    def _loose(self, op: Operation) -> None:
        """An operation run outside these handlers (a server's own ``graphql()`` or
        ``subscribe()`` call with this root value): priced and debited, recorded at once."""
        self.gate.finish(op)
        if not self._warned_loose:
            self._warned_loose = True
            self.gate.log.log(
                logging.WARNING,
                "ariadne_unscoped_operation",
                "quotaql: an operation ran outside the CostLimiter's handlers (a call of"
                " ariadne.graphql or subscribe with its root value?): it was priced and"
                " debited when it started, but it is not refunded and its later events are"
                " not charged (docs/ariadne.md)",
            )

    def _answered(self, scope: _Scope, success: bool, result: dict[str, Any]) -> GraphQLResult:
        """The result to answer once the operation ran (or did not): ``extensions.cost``,
        ``data: null`` for a refusal, and the operation joins its response's answer."""
        op = scope.op
        if op is None:
            return success, result  # Ariadne refused it before the gate saw it
        if op.validate_only:
            kept = {"extensions": result["extensions"]} if "extensions" in result else {}
            success, result = True, {"data": None, **kept}
        elif op.error is not None:
            result = {"data": None, **result}
        extensions = self.gate.results(op)
        if extensions:
            result["extensions"] = {**result.get("extensions", {}), **extensions}
        ops = _answer.get()
        if ops is not None:
            ops.append(op)
        return success, result

    @contextlib.contextmanager
    def _response(self) -> Iterator[list[Operation]]:
        """The operations answered by one HTTP response."""
        ops: list[Operation] = []
        token = _answer.set(ops)
        try:
            yield ops
        finally:
            _answer.reset(token)

    def _respond(self, ops: list[Operation], response: Any) -> None:
        for op in ops:
            self.gate.respond(op, response)

    def _stream(self, results: AsyncGenerator[Any, None]) -> AsyncGenerator[Any, None]:
        """The subscription's results, charged per event, if the current scope holds an
        admitted subscription (a query over the websocket is answered already)."""
        scope = _scope.get()
        op = scope.running if scope is not None else None
        if scope is None or op is None or op.operation_type != "subscription":
            return results
        scope.streaming = True
        subscription = _Subscription(self.gate, op)
        self._streams[results] = subscription
        return subscription.events(results)

    def _stopped(self, results: AsyncGenerator[Any, None]) -> None:
        """Ariadne stopped the stream ``results``: the subscription is over."""
        subscription = self._streams.pop(results, None)
        if subscription is not None:
            subscription.close()


_INVALID = "GRAPHQL_VALIDATION_FAILED"


class _Validator:
    """Ariadne's ``query_validator``: the static pass, then validation (the application's
    ``query_validator``, or graphql-core's ``validate``), neither run again for a document
    that passed both (:meth:`Gate.validate`). A refusal of the static pass is answered as
    a validation error; the handler charges ``[limits] min_charge`` for it."""

    __slots__ = ("_gate", "_validate")

    def __init__(self, gate: Gate, validate: QueryValidator | None) -> None:
        self._gate = gate
        self._validate = validate

    def __call__(
        self,
        schema: GraphQLSchema,
        document_ast: DocumentNode,
        rules: Collection[type[ASTValidationRule]] | None = None,
        max_errors: int | None = None,
        type_info: Any = None,
    ) -> list[GraphQLError]:
        scope = _scope.get()
        op = scope.op if scope is not None else None
        options: dict[str, Any] = {"max_errors": max_errors}
        if type_info is not None:  # graphql-core 3.2 only
            options["type_info"] = type_info
        validate = self._validate or graphql_validate

        def validator(schema: GraphQLSchema, document: DocumentNode, rules: Any) -> Any:
            return validate(schema, document, rules, **options)

        return self._gate.validate(op, schema, document_ast, rules, validator)


def _runs_over_http(document: DocumentNode, name: str | None) -> bool:
    """The document's operation is a query or a mutation (the HTTP handler runs those)."""
    try:
        operation, _ = select_operation(document, name)
    except CostAnalysisError:
        return False
    return operation.operation is not OperationType.SUBSCRIPTION


class _Admission:
    """Ariadne's ``root_value``: the gate admits each operation, validated, before it runs;
    then the application's own root value (a value or a callable) is what resolvers get."""

    __slots__ = ("limiter", "root_value", "target")

    def __init__(self, limiter: CostLimiter, target: Any, root_value: Any) -> None:
        self.limiter = limiter
        self.target = target  # the handler, whose schema Ariadne configured
        self.root_value = root_value

    def _scope(self) -> _Scope:
        scope = _scope.get()
        return scope if scope is not None else _Scope(None, loose=True)

    def _root(self, args: tuple[Any, Any, Any, Any]) -> Any:
        root_value = self.root_value
        return root_value(*args) if callable(root_value) else root_value


class _SyncAdmission(_Admission):
    __slots__ = ()

    def __call__(
        self, context: Any, operation_name: str | None, variables: Any, document: DocumentNode
    ) -> Any:
        scope = self._scope()
        if scope.op is not None:  # parsed and validated: its worker time measured
            worktime.stop(scope.op.work)
        op = self.limiter.gate.admit(
            self.target.schema, document, variables, operation_name,
            context=context, request=scope.request, op=scope.op,  # what the handler began
        )  # fmt: skip
        self.limiter._admitted(scope, op)
        return self._root((context, operation_name, variables, document))


class _AsyncAdmission(_Admission):
    __slots__ = ()

    async def __call__(
        self, context: Any, operation_name: str | None, variables: Any, document: DocumentNode
    ) -> Any:
        scope = self._scope()
        if scope.op is not None:  # parsed and validated: its worker time measured
            worktime.stop(scope.op.work)
        op = await self.limiter.gate.admit_async(
            self.target.schema, document, variables, operation_name,
            context=context, request=scope.request, op=scope.op,  # what the handler began
        )  # fmt: skip
        self.limiter._admitted(scope, op)
        value = self._root((context, operation_name, variables, document))
        return await value if isawaitable(value) else value


class _Subscription:
    """One open subscription: each event after the first is charged, and the operation is
    finished exactly once (the stream ended, was refused, or was stopped)."""

    __slots__ = ("closed", "gate", "op")

    def __init__(self, gate: Gate, op: Operation) -> None:
        self.gate = gate
        self.op = op
        self.closed = False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.gate.finish(self.op)

    async def events(self, results: AsyncGenerator[Any, None]) -> AsyncGenerator[Any, None]:
        try:
            async for result in results:
                error = await self.gate.event_async(self.op)
                if error is not None:  # out of budget: this error is the last payload
                    yield ExecutionResult(data=None, errors=[error])
                    return
                yield result
        finally:
            self.close()
            await results.aclose()  # the source stops too (a no-op once it has ended)


class _LimitedASGI(ASGIGraphQL):
    """Ariadne's ASGI app, which also answers the lifespan protocol (Ariadne's own raises on
    a lifespan scope): started at once, the gate flushed at shutdown."""

    def __init__(
        self,
        gate: Gate,
        schema: GraphQLSchema,
        *,
        http_handler: CostLimitedHTTPHandler,
        websocket_handler: CostLimitedTransportWSHandler | CostLimitedWSHandler,
        **options: Unpack[_ASGIOptions],
    ) -> None:
        super().__init__(
            schema, http_handler=http_handler, websocket_handler=websocket_handler, **options
        )
        self.quotaql_gate = gate

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send, (self.quotaql_gate,))
            return
        await super().__call__(scope, receive, send)


class _Limited:
    """An ASGI handler of Ariadne's, made with its ``limiter`` first: it installs the
    limiter's hooks when Ariadne configures it."""

    limiter: CostLimiter

    def _limited_by(self, limiter: CostLimiter) -> None:
        """Take ``limiter`` once Ariadne's handler is made (and refuse what escapes it)."""
        self.limiter = limiter
        if getattr(self, "subscription_handlers", None):
            raise TypeError(
                "quotaql: subscription_handlers (server-sent events) run subscriptions"
                " outside the limiter's reach (it could not charge their events nor cap"
                " them): serve subscriptions over limiter.websocket_handler() instead"
            )

    def configure(self, *args: object, **kwargs: object) -> None:
        # Ariadne's configuration of its handlers (its app calls this), passed on as it came.
        super().configure(*args, **kwargs)  # type: ignore[misc]
        # A websocket handler runs queries and mutations through the app's HTTP handler.
        http = getattr(self, "http_handler", None)
        if http is not None and not isinstance(http, CostLimitedHTTPHandler):
            raise TypeError(
                "quotaql: this websocket handler's app has Ariadne's own HTTP handler, which"
                " would run every query and mutation (over HTTP and over the websocket)"
                " unlimited: pass http_handler=limiter.http_handler() too"
            )
        self.limiter._install(self, is_async=True)


class CostLimitedHTTPHandler(ScreensBodies, _Limited, GraphQLHTTPHandler):
    """Ariadne's ASGI HTTP handler, limited by ``limiter`` (see :class:`CostLimiter`).

    Queries and mutations over a websocket run through it too (Ariadne's websocket
    handlers call its ``execute_graphql_query``); they get ``extensions.cost``, no headers.
    """

    def __init__(self, limiter: CostLimiter, **options: Unpack[_HTTPOptions]) -> None:
        super().__init__(**options)
        self._limited_by(limiter)

    async def graphql_http_server(self, request: Request) -> Response:
        """Ariadne's, with the request's JSON screened (:func:`quotaql.asgi.read_body`):
        what a framework cannot parse safely is answered 400 ``INVALID_REQUEST_BODY`` and
        its client pays ``[limits] min_charge`` (a body nested 50,000 deep answered 500)."""
        try:
            return await super().graphql_http_server(request)
        except InvalidBody as refusal:
            await charge_body_async(self.limiter.gate, refusal, request=request,
                                    context={"request": request})  # fmt: skip
            return JSONResponse(refusal.payload(), status_code=refusal.status)

    async def extract_data_from_json_request(self, request: Request) -> Any:
        return self.read_json(await request.body())

    def extract_data_from_get_request(self, request: Request) -> dict[Any, Any]:
        _screen_variables(self, request.query_params.get("variables"))
        return super().extract_data_from_get_request(request)

    async def extract_data_from_multipart_request(
        self, request: Request
    ) -> dict[Any, Any] | list[Any]:
        with self.multipart_screen(reads_multipart(legacy=True)):  # Starlette reads it
            return await super().extract_data_from_multipart_request(request)

    async def get_middleware_for_request(self, request: Any, context: Any) -> Any:
        """Ariadne's, and a timer for a request sampled for tuning (:func:`_timed`)."""
        return _timed(self.limiter, await super().get_middleware_for_request(request, context))

    async def handle_request(self, request: Request) -> Response:
        with self.limiter._response() as ops:
            response = await super().handle_request(request)
        self.limiter._respond(ops, response)
        return response

    async def execute_graphql_query(
        self,
        request: Any,
        data: Any,
        *,
        context_value: Any = None,
        query_document: DocumentNode | None = None,
    ) -> GraphQLResult:
        gate = self.limiter.gate
        with self.limiter._operation(request) as scope:
            if context_value is None:  # the identity hooks get the context, as resolvers do
                context_value = await self.get_context_for_request(request, data)
            scope.op = await gate.begin_async(context=context_value, request=request)
            success, result = await super().execute_graphql_query(
                request, data, context_value=context_value, query_document=query_document
            )
            op = scope.running
            if op is not None:
                timing.attach(op, scope.timer)
                await gate.settle_async(op, result.get("data"), _errors(result))
            unpriced = self.limiter._unpriced(scope, result)
            if unpriced is not None and scope.op is not None:
                await gate.reject_async(scope.op, unpriced)
            return self.limiter._answered(scope, success, result)


class _LimitedWebsocket(ScreensBodies, _Limited):
    """A websocket handler of Ariadne's that keeps the ``connection_init`` payload where
    the identity finds an API key in it (a browser cannot set headers on a websocket), and
    reads each message through the body screen (:class:`quotaql.asgi.ScreenedWebSocket`)."""

    async def handle_websocket(self, websocket: WebSocket) -> None:
        screened = cast("WebSocket", ScreenedWebSocket(websocket, self))
        await super().handle_websocket(screened)  # type: ignore[misc]

    async def handle_websocket_connection_init_message(
        self, websocket: WebSocket, message: dict[str, Any], *args: Any
    ) -> None:
        web.keep_connection_params(websocket, message.get("payload"))
        await super().handle_websocket_connection_init_message(  # type: ignore[misc]
            websocket, message, *args
        )


class CostLimitedTransportWSHandler(_LimitedWebsocket, GraphQLTransportWSHandler):
    """Ariadne's ``graphql-transport-ws`` handler, limited by ``limiter``.

    A subscription is priced and debited when it starts (a refusal answers its ``error``
    message); each event after the first costs its price again, and a refused event ends
    the subscription with the ``RATE_LIMITED`` error as its last ``next`` payload.
    """

    def __init__(self, limiter: CostLimiter, **options: Unpack[_TransportWSOptions]) -> None:
        super().__init__(**options)
        self._limited_by(limiter)

    async def handle_websocket_subscribe(
        self, websocket: WebSocket, data: Any, operation_id: str, client_context: ClientContext
    ) -> None:
        with self.limiter._operation(websocket) as scope:
            try:
                await super().handle_websocket_subscribe(
                    websocket, data, operation_id, client_context
                )
            finally:
                await self.limiter._charge_unpriced(scope, data)

    # A plain def, not async: Ariadne calls it inside handle_websocket_subscribe to make
    # the stream's task, so the operation's scope is still the current one here.
    def observe_async_results(
        self,
        websocket: WebSocket,
        results_producer: AsyncGenerator[Any, None],
        operation_id: str,
        client_context: ClientContext,
    ) -> Coroutine[Any, Any, None]:
        results = self.limiter._stream(results_producer)
        return super().observe_async_results(websocket, results, operation_id, client_context)

    async def stop_websocket_operation(
        self, websocket: WebSocket, operation_id: str, client_context: ClientContext
    ) -> None:
        operation = client_context.operations.get(operation_id)
        try:
            await super().stop_websocket_operation(websocket, operation_id, client_context)
        finally:
            if operation is not None:
                self.limiter._stopped(operation.generator)


class CostLimitedWSHandler(_LimitedWebsocket, GraphQLWSHandler):
    """Ariadne's (older) ``graphql-ws`` handler, limited by ``limiter``; as
    :class:`CostLimitedTransportWSHandler`, the refused event's error is the last ``data``."""

    def __init__(self, limiter: CostLimiter, **options: Unpack[_WSOptions]) -> None:
        super().__init__(**options)
        self._limited_by(limiter)

    async def process_single_message(
        self,
        websocket: WebSocket,
        data: Any,
        operation_id: str,
        operations: dict[str, AriadneOperation],
    ) -> None:
        # Ariadne parses here, then starts the operation: one scope for both.
        with self.limiter._operation(websocket) as scope:
            try:
                await super().process_single_message(websocket, data, operation_id, operations)
            finally:
                await self.limiter._charge_unpriced(scope, data)

    def observe_async_results(  # a plain def: see CostLimitedTransportWSHandler
        self, websocket: WebSocket, results: AsyncGenerator[Any, None], operation_id: str
    ) -> Coroutine[Any, Any, None]:
        return super().observe_async_results(websocket, self.limiter._stream(results), operation_id)

    async def stop_websocket_operation(
        self, websocket: WebSocket, operation: AriadneOperation
    ) -> None:
        try:
            await super().stop_websocket_operation(websocket, operation)
        finally:
            self.limiter._stopped(operation.generator)


class _WSGIResponse:
    """A WSGI status and header list as the response object ``Gate.respond`` writes on."""

    def __init__(self, status: str, headers: list[tuple[str, str]]) -> None:
        self.status_code = int(status.split(" ", 1)[0])
        self.headers = wsgiref.headers.Headers(headers)  # writes go to the list itself

    @property
    def status(self) -> str:
        try:
            phrase = HTTPStatus(self.status_code).phrase
        except ValueError:  # an http_status of the configuration's own
            phrase = "Unknown"
        return f"{self.status_code} {phrase}"


class CostLimitedWSGI(ScreensBodies, WSGIGraphQL):
    """``ariadne.wsgi.GraphQL``, limited by ``limiter`` (see :class:`CostLimiter`).

    Raises:
        TypeError: the limiter's storage is async (``AsyncRedisStorage``): a WSGI server
            cannot await it; use ``RedisStorage`` or the ASGI app.
    """

    def __init__(
        self, limiter: CostLimiter, schema: GraphQLSchema, **options: Unpack[_WSGIOptions]
    ) -> None:
        if limiter.gate.is_async:
            raise TypeError(
                "quotaql: this CostLimiter's storage is async (AsyncRedisStorage), which a"
                " WSGI server cannot await: use RedisStorage, or serve the ASGI app"
            )
        super().__init__(schema, **options)
        self.limiter = limiter
        limiter._install(self, is_async=False)

    def handle_request(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        """Ariadne's, with the request's JSON screened (see
        :meth:`CostLimitedHTTPHandler.graphql_http_server`)."""
        try:
            with self.limiter._response() as ops:

                def respond(status: str, headers: list[tuple[str, str]], *exc_info: Any) -> Any:
                    response = _WSGIResponse(status, headers)
                    self.limiter._respond(ops, response)
                    return start_response(response.status, headers, *exc_info)

                return super().handle_request(environ, respond)
        except InvalidBody as refusal:
            charge_body(self.limiter.gate, refusal, request=environ, context={"request": environ})
            return refusal.wsgi(start_response)

    def extract_data_from_json_request(self, environ: dict[str, Any]) -> Any:
        if environ.get("CONTENT_LENGTH") == "0":  # an empty body is not JSON either
            return self.read_json(b"")
        length = self.get_request_content_length(environ)
        return self.read_json(self.get_request_body(environ, length))

    def extract_data_from_get(self, query_params: dict[str, Any]) -> dict[str, Any]:
        _screen_variables(self, query_params.get("variables"))
        return super().extract_data_from_get(query_params)

    def extract_data_from_multipart_request(self, environ: dict[str, Any]) -> Any:
        with self.multipart_screen(reads_multipart()):
            return super().extract_data_from_multipart_request(environ)

    def execute_query(self, environ: dict[str, Any], data: Any) -> GraphQLResult:
        gate = self.limiter.gate
        with self.limiter._operation(environ) as scope:
            success, result = super().execute_query(environ, data)
            op = scope.running
            if op is not None:
                timing.attach(op, scope.timer)
                gate.settle(op, result.get("data"), _errors(result))
            unpriced = self.limiter._unpriced(scope, result)
            if unpriced is not None and scope.op is not None:
                gate.reject(scope.op, unpriced)
            return self.limiter._answered(scope, success, result)

    def get_middleware_for_request(self, environ: dict[str, Any], context: Any) -> Any:
        """Ariadne's, and a timer for a request sampled for tuning (:func:`_timed`)."""
        return _timed(self.limiter, super().get_middleware_for_request(environ, context))


def _timed(limiter: CostLimiter, middleware: Any) -> Any:
    """A request's middleware, with a timer of its resolvers first (the innermost) when it
    is sampled for tuning (:mod:`quotaql.gate.timing`): no other request's are wrapped."""
    scope = _scope.get()
    timer = timing.sample(limiter.gate) if scope is not None else None
    if scope is None or timer is None:
        return middleware
    scope.timer = timer
    return [timer, *(middleware or ())]


def _screen_variables(handler: ScreensBodies, variables: Any) -> None:
    """A GET request's ``variables``, screened before Ariadne parses them (json.loads gave a
    RecursionError, a 500, at 1,500 deep): a JSON object, or null."""
    if isinstance(variables, str) and variables.strip():
        handler.read_json(variables.strip(), parameter=True)


def _errors(result: dict[str, Any]) -> list[GraphQLError] | None:
    """A formatted result's errors, as the actual cost reads them (their paths)."""
    errors = result.get("errors")
    if not errors:
        return None
    return [
        GraphQLError(str(error.get("message", "")), path=error.get("path"))
        if isinstance(error, dict)
        else error
        for error in errors
    ]
