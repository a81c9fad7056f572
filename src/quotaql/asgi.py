"""ASGI helpers: a request body cap and screen, and a lifespan that flushes quotaql at shutdown.

**Body cap.**
Django (``DATA_UPLOAD_MAX_MEMORY_SIZE``), Flask and Quart (``MAX_CONTENT_LENGTH``), aiohttp
(``client_max_size``), Litestar (``request_max_body_size``) and Sanic (``REQUEST_MAX_SIZE``)
cap a request's body themselves; Starlette, FastAPI, Strawberry's and Ariadne's ASGI apps do
not, and uvicorn reads whatever a client sends. :class:`BodyLimit` refuses a body larger than
``max_bytes`` before the application reads it whole: by its ``Content-Length`` at once, or,
for a chunked body, as soon as the chunks pass the limit. The answer is HTTP 413 with a
GraphQL error (``REQUEST_TOO_LARGE``); nothing is parsed, nothing is charged.

**Body screen.** A JSON body is read whole (within the cap) and screened before the
framework parses it (:func:`read_body`): invalid UTF-8, invalid JSON, JSON nested deeper than
``max_depth`` or holding ``max_values`` values or more, and a body that is neither an
operation (a JSON object) nor a batch (a list of them) are answered 400 with a GraphQL error
(``INVALID_REQUEST_BODY``, ``extensions.reason``: ``not_utf8``, ``not_json``, ``too_deep``,
``too_many_values``, ``not_an_operation``) instead of the framework's 500. Given the
``limiter`` (an adapter or a gate), the screen charges the client's address ``[limits]
min_charge`` for each such body, as for a document that does not parse. The adapters that
read the body themselves screen it as they parse it with the same function
(:class:`ScreensBodies`: :func:`quotaql.plugin.views.screened` for Strawberry's views,
Ariadne's ``CostLimiter`` handlers).

**Shutdown.** A limiter on Redis gives refunds back off the response path, and releases
concurrency leases in tasks: at shutdown, some may still be waiting. :class:`Lifespan`
answers the ASGI lifespan protocol for an application that has none (Strawberry's and
Ariadne's ``GraphQL`` apps) and, at shutdown, awaits :meth:`~quotaql.gate.Gate.aflush` of
each gate it was given. Under Starlette or FastAPI, call ``await limiter.gate.aflush()`` from
the application's own lifespan instead; Ariadne's :meth:`quotaql.ariadne.CostLimiter.asgi`
app does it by itself.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import re
from array import array
from http import HTTPStatus
from itertools import accumulate
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator, MutableMapping, Sequence

    Scope = MutableMapping[str, Any]
    Message = MutableMapping[str, Any]
    Receive = Callable[[], Awaitable[Message]]
    Send = Callable[[Message], Awaitable[None]]
    ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_DEPTH",
    "DEFAULT_MAX_VALUES",
    "INVALID_REQUEST_BODY",
    "REQUEST_TOO_LARGE",
    "BodyLimit",
    "InvalidBody",
    "Lifespan",
    "ScreenedWebSocket",
    "ScreensBodies",
    "charge_body",
    "charge_body_async",
    "read_body",
    "reads_multipart",
    "screen_body",
    "serve_lifespan",
]

#: A GraphQL request within the default document limits (``max_length`` = 100,000
#: characters) with room for its variables; file uploads need more.
DEFAULT_MAX_BYTES = 1_048_576
REQUEST_TOO_LARGE = "REQUEST_TOO_LARGE"
INVALID_REQUEST_BODY = "INVALID_REQUEST_BODY"
#: How deep a request body's JSON may nest: an operation with variables needs a few levels.
DEFAULT_MAX_DEPTH = 64
#: How many JSON values a request body may hold (containers, items, members): ``json.loads``
#: builds up to ~0.7 µs of objects per value (nested ones; 0.02 µs for a short string), so
#: the parse of any body within it costs under ~15 ms, and 20,000 is room for a bulk
#: mutation of 1,000 inputs of 15 fields.
DEFAULT_MAX_VALUES = 20_000

_REASONS = {
    "not_utf8": "The request body is not valid UTF-8.",
    "not_json": "The request body is not valid JSON.",
    "too_deep": "The request body nests deeper than {limit} levels.",
    "too_many_values": "The request body holds more than {limit} JSON values.",
    "not_an_operation": "The request body must be an operation (a JSON object) or a list of them.",
    "not_an_object": "A JSON parameter of the request (variables, extensions) must be an object.",
    "no_multipart": "This server reads no multipart/form-data (python-multipart is not"
    " installed): post application/json.",
}


class BodyLimit:
    """``BodyLimit(app, max_bytes)``: ``app`` with HTTP request bodies capped at ``max_bytes``.

    Example::

        app = BodyLimit(GraphQL(schema), max_bytes=256_000)  # uvicorn module:app

    Websockets and lifespan events pass through untouched; a JSON body is screened (see the
    module): ``max_depth`` bounds its nesting, ``max_values`` the values it holds, and
    ``limiter`` (an adapter or a gate), when given, charges the address of a body refused
    so. ``screen=False`` caps the size only: for an app that screens as it parses (a view
    made by :func:`quotaql.plugin.views.screened`, Ariadne's ``CostLimiter`` handler),
    which then parses the body once instead of twice.
    """

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int = DEFAULT_MAX_BYTES,
        *,
        max_depth: int = DEFAULT_MAX_DEPTH,
        max_values: int = DEFAULT_MAX_VALUES,
        limiter: Any = None,
        screen: bool = True,
    ) -> None:
        for name, value in (
            ("max_bytes", max_bytes),
            ("max_depth", max_depth),
            ("max_values", max_values),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
        gate = getattr(limiter, "gate", limiter)
        if gate is not None and not callable(getattr(gate, "reject_async", None)):
            raise TypeError(
                f"BodyLimit(limiter=) takes a gate or an adapter, got {type(gate).__name__}"
            )
        self.app = app
        self.max_bytes = max_bytes
        self.max_depth = max_depth
        self.max_values = max_values
        self.gate = gate
        self.screen = screen

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = _content_length(scope)
        if length is not None and length > self.max_bytes:
            await self._refuse(send)
            return
        if self.screen and _is_json(scope):
            await self._screened(scope, receive, send)
            return
        read = 0
        refused = False

        async def limited() -> Message:
            nonlocal read, refused
            message = await receive()
            if message["type"] == "http.request" and not refused:
                read += len(message.get("body", b""))
                if read > self.max_bytes:
                    refused = True
                    await self._refuse(send)
                    return {"type": "http.disconnect"}  # the application stops reading
            return message

        async def guarded(message: Message) -> None:
            if not refused:  # after the 413, the application's own answer goes nowhere
                await send(message)

        try:
            await self.app(scope, limited, guarded)
        except Exception:
            if not refused:
                raise  # the application's own failure
            # It failed on the disconnect it was handed: the client has its 413 already.

    async def _screened(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Read the JSON body whole (within the cap), screen it, then hand it to the app."""
        chunks: list[bytes] = []
        read = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client left before its body was in
            chunk = message.get("body", b"")
            read += len(chunk)
            if read > self.max_bytes:
                await self._refuse(send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        try:
            read_body(body, self.max_depth, max_values=self.max_values)
        except InvalidBody as refusal:
            if self.gate is not None:  # the address pays, as for a document that does not parse
                await charge_body_async(self.gate, refusal, request=scope)
            await _answer(send, refusal.status, refusal.payload())
            return
        given = False

        async def replay() -> Message:
            nonlocal given
            if given:
                return await receive()  # what comes after the body: a disconnect
            given = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send) -> None:
        error = {
            "message": f"The request body is larger than {self.max_bytes} bytes.",
            "extensions": {"code": REQUEST_TOO_LARGE, "limit": self.max_bytes},
        }
        await _answer(send, 413, {"data": None, "errors": [error]})


def screen_body(
    body: bytes | str, max_depth: int = DEFAULT_MAX_DEPTH, max_values: int = DEFAULT_MAX_VALUES
) -> str | None:
    """Why ``body`` is not a GraphQL request a framework can parse safely (``not_utf8``,
    ``not_json``, ``too_deep``, ``too_many_values``, ``not_an_operation``), or None when
    it is one (see :func:`read_body`).

    Example:
        >>> screen_body(b'{"query": "{ hello }"}'), screen_body(b"null"), screen_body(b"[[[1]]]", 2)
        (None, 'not_an_operation', 'too_deep')
    """
    try:
        read_body(body, max_depth, max_values=max_values)
    except InvalidBody as refusal:
        return refusal.reason
    return None


class InvalidBody(ValueError):
    """A request body (or a JSON parameter of a GET request) the screen refused.

    ``reason`` says why (``not_utf8``, ``not_json``, ``too_deep``, ``too_many_values``,
    ``not_an_operation``, ``not_an_object``); :meth:`payload` is the answer (with status
    400) that every adapter gives: a GraphQL error with ``extensions.code =
    "INVALID_REQUEST_BODY"`` and the reason. ``limit`` is the bound a ``too_deep`` or
    ``too_many_values`` body crossed (its message names it).
    """

    status = 400

    def __init__(self, reason: str, limit: int = DEFAULT_MAX_DEPTH) -> None:
        self.reason = reason
        self.message = _REASONS[reason].format(limit=limit)
        super().__init__(self.message)

    @property
    def extensions(self) -> dict[str, Any]:
        return {"code": INVALID_REQUEST_BODY, "reason": self.reason}

    def payload(self) -> dict[str, Any]:
        """The response's JSON: ``{"data": null, "errors": [the error]}``."""
        return {"data": None, "errors": [{"message": self.message, "extensions": self.extensions}]}

    def graphql_error(self) -> Any:
        """The error as a ``graphql.GraphQLError`` (for a gate, or a framework's result)."""
        from graphql import GraphQLError  # noqa: PLC0415  # only where graphql-core is in use

        return GraphQLError(self.message, extensions=self.extensions)

    def wsgi(self, start_response: Callable[..., Any]) -> list[bytes]:
        """The answer, from a WSGI application."""
        status = f"{self.status} {HTTPStatus(self.status).phrase}"
        start_response(status, [("Content-Type", "application/json; charset=UTF-8")])
        return [json.dumps(self.payload()).encode()]


class ScreensBodies:
    """A mixin for an adapter that reads the request's JSON itself (Strawberry's views,
    Ariadne's handlers): it reads it through :func:`read_body`, within two class
    attributes."""

    #: How deep the request's JSON may nest (an operation with variables needs a few levels).
    max_body_depth: ClassVar[int] = DEFAULT_MAX_DEPTH
    #: How many values it may hold (see :data:`DEFAULT_MAX_VALUES`).
    max_body_values: ClassVar[int] = DEFAULT_MAX_VALUES

    def read_json(self, data: bytes | str, *, parameter: bool = False) -> Any:
        """:func:`read_body` within this adapter's bounds."""
        return read_body(data, self.max_body_depth, max_values=self.max_body_values,
                         parameter=parameter)  # fmt: skip

    @contextlib.contextmanager
    def multipart_screen(self, readable: bool) -> Iterator[None]:
        """Around a framework's reading of ``multipart/form-data``: refused
        (``no_multipart``) when the framework cannot read it (``readable``: see
        :func:`reads_multipart`), and a field ``json.loads`` gives up on (a
        ``RecursionError``, which frameworks let through as a 500) refused ``too_deep``."""
        if not readable:
            raise InvalidBody("no_multipart")
        try:
            yield
        except RecursionError:
            raise InvalidBody("too_deep", self.max_body_depth) from None


class ScreenedWebSocket:
    """A Starlette ``WebSocket`` whose ``receive_json`` reads each message through the
    screen of ``screen`` (an object within its bounds): a message refused (nested 50,000
    deep, not JSON, a binary frame) closes the connection 4400 with its reason and ends
    the handler's loop (``WebSocketDisconnect``), where ``json.loads`` raised in it (a
    ``RecursionError`` or a ``ValueError``: the connection died with a traceback). Every
    other attribute is the websocket's."""

    def __init__(self, websocket: Any, screen: ScreensBodies) -> None:
        self.websocket = websocket
        self.screen = screen

    def __getattr__(self, name: str) -> Any:
        return getattr(self.websocket, name)

    async def receive_json(self, mode: str = "text") -> Any:
        from starlette.websockets import WebSocketDisconnect  # noqa: PLC0415  # its users have it

        message = await self.websocket.receive()
        if message["type"] == "websocket.disconnect":
            raise WebSocketDisconnect(message.get("code", 1000), message.get("reason"))
        data = message.get("text" if mode == "text" else "bytes")
        try:
            value = self.screen.read_json(data, parameter=True) if data is not None else None
            if value is None:
                raise InvalidBody("not_an_object")
        except InvalidBody as refusal:
            await self.websocket.close(4400, refusal.message)
            raise WebSocketDisconnect(4400, refusal.message) from None
        return value


@functools.cache
def reads_multipart(*, legacy: bool = False) -> bool:
    """Whether python-multipart is installed: Ariadne's WSGI app and Starlette read
    ``multipart/form-data`` with it, which neither requires (without it, every multipart
    request answered 500). ``legacy``: its package from before 0.0.13 (``multipart``, which
    Starlette takes too)."""
    if importlib.util.find_spec("python_multipart") is not None:
        return True
    old = importlib.util.find_spec("multipart") if legacy else None
    return old is not None and old.submodule_search_locations is not None  # not a module


def read_body(
    body: bytes | str,
    max_depth: int = DEFAULT_MAX_DEPTH,
    *,
    max_values: int = DEFAULT_MAX_VALUES,
    parameter: bool = False,
) -> Any:
    """The JSON value of a request body, once screened: what a framework would parse.

    The body must be UTF-8, JSON, nested at most ``max_depth`` deep, hold fewer than
    ``max_values`` values (counted as its containers and the commas between their items
    and members, outside strings: parsing costs up to ~0.7 µs a value), and be an
    operation (a JSON object) or a batch (a non-empty list of them); with
    ``parameter``, a JSON parameter of a GET request (``variables``, ``extensions``): an
    object, or null.

    Both bounds are checked before anything is parsed, with C-level ``bytes`` methods
    (``count``, ``split``, ``translate``, ``replace``): a body nested 50,000 deep costs no
    recursion, and a megabyte of small values is refused before ``json.loads`` builds
    them (see :func:`_nests_deeper`). A list whose first item is no object is refused
    unparsed.

    Raises:
        InvalidBody: what is wrong with it (``reason``).
    """
    if isinstance(body, str):
        text, data = body, body.encode("utf-8", "surrogatepass")
    else:
        data = bytes(body)
        try:
            # Parsed as UTF-8 text, not bytes: json.loads would take a body whose first
            # bytes hold a NUL for UTF-16 or UTF-32, which the brackets here are not.
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidBody("not_utf8") from None
    openers = data.count(b"[") + data.count(b"{")
    if openers > max_depth or openers + data.count(b",") >= max_values:  # counted in strings too
        outside = _outside_strings(data)
        openers = outside.count(b"[") + outside.count(b"{")
        # Each value but the first of a container follows a comma; each container opens.
        if openers + outside.count(b",") >= max_values:  # no more passes over it: at most
            if _opens_deeper(outside, max_depth):  # a run of openers says too deep
                raise InvalidBody("too_deep", max_depth)
            raise InvalidBody("too_many_values", max_values)
        if openers > max_depth and _nests_deeper(outside, max_depth):
            raise InvalidBody("too_deep", max_depth)
    if not parameter:
        batch = _BATCH.match(data)
        if batch is not None and batch.group(1) != b"{":  # a list, and not of operations:
            raise InvalidBody("not_an_operation")  # not worth parsing
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        raise InvalidBody("not_json") from None
    if parameter:
        if value is None or type(value) is dict:
            return value
        raise InvalidBody("not_an_object")
    if type(value) is dict:
        return value
    if type(value) is list and value and all(type(each) is dict for each in value):
        return value
    raise InvalidBody("not_an_operation")


def charge_body(gate: Any, refusal: InvalidBody, *, request: Any, context: Any = None) -> None:
    """Charge the client of a refused body ``[limits] min_charge`` through ``gate`` (a
    :class:`~quotaql.gate.Gate`), as for a document that does not parse: counted
    ``decision="rejected"``, logged, in its span. From a sync view; with an async storage
    (which a sync view cannot await) it is counted, not charged."""
    op = gate.begin(context=context, request=request)
    try:
        if gate.is_async:
            gate.fail(op, [refusal.graphql_error()])
        else:
            gate.reject(op, [refusal.graphql_error()])
    finally:
        gate.finish(op)


async def charge_body_async(
    gate: Any, refusal: InvalidBody, *, request: Any, context: Any = None
) -> None:
    """:func:`charge_body` on an event loop."""
    op = await gate.begin_async(context=context, request=request)
    try:
        await gate.reject_async(op, [refusal.graphql_error()])
    finally:
        gate.finish(op)


# A list, and the first byte of its first item.
_BATCH = re.compile(rb"[ \t\n\r]*\[[ \t\n\r]*(.?)", re.DOTALL)
# Every byte but the four brackets, to delete; an opening one made 1, a closing one -1 (a
# signed byte).
_NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))
_SIGNS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_PAIR = b"\x01\xff"


def _outside_strings(data: bytes) -> bytes:
    """The JSON text ``data`` without its strings (escapes first: an escaped quote does not
    end one): every other piece between quotes."""
    if b"\\" in data:
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    if b'"' in data:
        data = b"".join(data.split(b'"')[::2])
    return data


def _opens_deeper(outside: bytes, max_depth: int) -> bool:
    """Whether ``outside`` holds a run of more than ``max_depth`` openers (in one pass)."""
    return b"\x01" * (max_depth + 1) in outside.translate(_SIGNS, _NOT_BRACKETS)


def _nests_deeper(outside: bytes, max_depth: int) -> bool:
    """Whether the JSON text ``outside`` (its strings taken out) nests brackets deeper than
    ``max_depth``, in C-level passes (a Python loop over 500,000 brackets costs ~25 ms).

    Every byte but the brackets goes, each bracket made +1 or -1. A pass of ``replace``
    takes out the innermost pairs (side by side now), one level exactly: a pair it makes
    by taking one out waits for the next pass. A wide body is gone in a few passes; a run
    of openers as long as the depth still allowed ends it at once; and when a pass takes
    out less than a quarter, the running sum (``accumulate``, in C) gives the depth of
    what is left.
    """
    signs = outside.translate(_SIGNS, _NOT_BRACKETS)
    if len(signs) <= max_depth:
        return False
    for passes in range(max_depth):
        if not signs:
            return False
        if b"\x01" * (max_depth + 1 - passes) in signs:
            return True
        inner = signs.replace(_PAIR, b"")
        if len(inner) * 4 > len(signs) * 3:  # deep and narrow: add up what is left
            return passes + 1 + max(accumulate(array("b", inner)), default=0) > max_depth
        signs = inner
    return _PAIR in signs


def _is_json(scope: Scope) -> bool:
    """An HTTP request whose body a GraphQL server parses as JSON (a POST without a content
    type is taken as JSON too; a multipart upload is not)."""
    if scope.get("method") != "POST":
        return False
    for name, value in scope.get("headers", ()):
        if name.lower() == b"content-type":
            return b"json" in value.lower()
    return True


async def _answer(send: Send, status: int, payload: dict[str, Any]) -> None:
    body = json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


class _Flushes(Protocol):
    async def aflush(self, timeout: float = ...) -> int: ...


class Lifespan:
    """``Lifespan(app, *limiters)``: ``app`` (which handles no lifespan events) with quotaql
    started (each gate's storage checked: a Redis that may evict its keys fails the
    startup) and flushed at shutdown.

    Example::

        limiter = CostLimiter.from_config("quotaql.toml", storage=AsyncRedisStorage(...))
        app = Lifespan(GraphQL(schema), limiter)  # uvicorn module:app (--lifespan on)

    Args:
        app: the ASGI app; it gets every HTTP and websocket scope, never a lifespan one.
        limiters: gates (:class:`~quotaql.gate.Gate`) or adapters (their ``gate``) whose
            waiting refunds and lease releases shutdown awaits, for at most ``timeout``
            seconds each.
        timeout: seconds each flush may take.
    """

    def __init__(self, app: ASGIApp, *limiters: Any, timeout: float = 5.0) -> None:
        self.app = app
        self.gates: tuple[_Flushes, ...] = tuple(getattr(one, "gate", one) for one in limiters)
        for gate in self.gates:
            if not callable(getattr(gate, "aflush", None)):
                raise TypeError(f"Lifespan needs gates or adapters, got {type(gate).__name__}")
        self.timeout = timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send, self.gates, self.timeout)
            return
        await self.app(scope, receive, send)


async def serve_lifespan(
    receive: Receive, send: Send, gates: Sequence[_Flushes], timeout: float = 5.0
) -> None:
    """Answer one ASGI lifespan scope: at startup, each gate's ``astart`` (its storage's
    Redis checked: an evicting one fails the startup, and the server does not start); at
    shutdown, each gate flushed (a flush that fails is reported as the shutdown's failure,
    after the others ran)."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            try:
                for gate in gates:  # each gate's storage checked before the first request
                    start = getattr(gate, "astart", None)
                    if start is not None:
                        await start()
            except Exception as error:  # the server is told, and does not start
                await send({"type": "lifespan.startup.failed", "message": str(error)})
                return
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            failed: list[str] = []
            for gate in gates:
                try:
                    await gate.aflush(timeout)
                except Exception as error:  # the server is told, below
                    failed.append(f"{type(error).__name__}: {error}")
            if failed:
                await send({"type": "lifespan.shutdown.failed", "message": "; ".join(failed)})
            else:
                await send({"type": "lifespan.shutdown.complete"})
            return
