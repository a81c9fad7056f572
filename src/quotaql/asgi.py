"""ASGI helpers: a request body cap, and a lifespan that flushes quotaql at shutdown.

**Body cap.**
Django (``DATA_UPLOAD_MAX_MEMORY_SIZE``), Flask and Quart (``MAX_CONTENT_LENGTH``), aiohttp
(``client_max_size``), Litestar (``request_max_body_size``) and Sanic (``REQUEST_MAX_SIZE``)
cap a request's body themselves; Starlette, FastAPI, Strawberry's and Ariadne's ASGI apps do
not, and uvicorn reads whatever a client sends. :class:`BodyLimit` refuses a body larger than
``max_bytes`` before the application reads it whole: by its ``Content-Length`` at once, or,
for a chunked body, as soon as the chunks pass the limit. The answer is HTTP 413 with a
GraphQL error (``REQUEST_TOO_LARGE``); nothing is parsed, nothing is charged.

**Body screen.** A JSON body is read whole (within the cap) and screened before the
framework parses it: invalid UTF-8, invalid JSON, JSON nested deeper than ``max_depth``, and a
body that is neither an operation (a JSON object) nor a batch (a list of them) are answered
400 with a GraphQL error (``INVALID_REQUEST_BODY``, ``extensions.reason``: ``not_utf8``,
``not_json``, ``too_deep``, ``not_an_operation``) instead of the framework's 500. Given the
``limiter`` (an adapter or a gate), the screen charges the client's address ``[limits]
min_charge`` for each such body, as for a document that does not parse.

**Shutdown.** A limiter on Redis gives refunds back off the response path, and releases
concurrency leases in tasks: at shutdown, some may still be waiting. :class:`Lifespan`
answers the ASGI lifespan protocol for an application that has none (Strawberry's and
Ariadne's ``GraphQL`` apps) and, at shutdown, awaits :meth:`~quotaql.gate.Gate.aflush` of
each gate it was given. Under Starlette or FastAPI, call ``await limiter.gate.aflush()`` from
the application's own lifespan instead; Ariadne's :meth:`quotaql.ariadne.CostLimiter.asgi`
app does it by itself.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, MutableMapping, Sequence

    Scope = MutableMapping[str, Any]
    Message = MutableMapping[str, Any]
    Receive = Callable[[], Awaitable[Message]]
    Send = Callable[[Message], Awaitable[None]]
    ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_DEPTH",
    "INVALID_REQUEST_BODY",
    "REQUEST_TOO_LARGE",
    "BodyLimit",
    "Lifespan",
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

# A JSON string (to blank out before counting brackets), and the brackets themselves.
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")
_REASONS = {
    "not_utf8": "The request body is not valid UTF-8.",
    "not_json": "The request body is not valid JSON.",
    "too_deep": "The request body nests deeper than {depth} levels.",
    "not_an_operation": "The request body must be an operation (a JSON object) or a list of them.",
}


class BodyLimit:
    """``BodyLimit(app, max_bytes)``: ``app`` with HTTP request bodies capped at ``max_bytes``.

    Example::

        app = BodyLimit(GraphQL(schema), max_bytes=256_000)  # uvicorn module:app

    Websockets and lifespan events pass through untouched; a JSON body is screened (see the
    module): ``max_depth`` bounds its nesting, and ``limiter`` (an adapter or a gate), when
    given, charges the address of a body refused so.
    """

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int = DEFAULT_MAX_BYTES,
        *,
        max_depth: int = DEFAULT_MAX_DEPTH,
        limiter: Any = None,
    ) -> None:
        for name, value in (("max_bytes", max_bytes), ("max_depth", max_depth)):
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
        self.gate = gate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = _content_length(scope)
        if length is not None and length > self.max_bytes:
            await self._refuse(send)
            return
        if _is_json(scope):
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
        reason = screen_body(body, self.max_depth)
        if reason is not None:
            await self._refuse_body(scope, send, reason)
            return
        given = False

        async def replay() -> Message:
            nonlocal given
            if given:
                return await receive()  # what comes after the body: a disconnect
            given = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _refuse_body(self, scope: Scope, send: Send, reason: str) -> None:
        message = _REASONS[reason].format(depth=self.max_depth)
        extensions: dict[str, Any] = {"code": INVALID_REQUEST_BODY, "reason": reason}
        if self.gate is not None:  # the address pays for the request, as for a bad document
            from graphql import GraphQLError  # noqa: PLC0415  # only with a gate, which has it

            op = await self.gate.begin_async(request=scope)
            await self.gate.reject_async(op, [GraphQLError(message, extensions=extensions)])
            self.gate.finish(op)
        error = {"message": message, "extensions": extensions}
        await _answer(send, 400, {"data": None, "errors": [error]})

    async def _refuse(self, send: Send) -> None:
        error = {
            "message": f"The request body is larger than {self.max_bytes} bytes.",
            "extensions": {"code": REQUEST_TOO_LARGE, "limit": self.max_bytes},
        }
        await _answer(send, 413, {"data": None, "errors": [error]})


def screen_body(body: bytes, max_depth: int = DEFAULT_MAX_DEPTH) -> str | None:
    """Why ``body`` is not a GraphQL request a framework can parse safely (``not_utf8``,
    ``not_json``, ``too_deep``, ``not_an_operation``), or None when it is one.

    The nesting is measured on the brackets outside strings before anything is parsed (in
    C-speed passes, and a loop over the brackets alone that stops past ``max_depth``), so a
    body nested 50,000 deep costs no recursion.

    Example:
        >>> screen_body(b'{"query": "{ hello }"}'), screen_body(b"null"), screen_body(b"[[[1]]]", 2)
        (None, 'not_an_operation', 'too_deep')
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return "not_utf8"
    if text.count("[") + text.count("{") > max_depth and _deeper_than(text, max_depth):
        return "too_deep"
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return "not_json"
    if type(value) is dict:
        return None
    if type(value) is list and value and all(type(each) is dict for each in value):
        return None
    return "not_an_operation"


def _deeper_than(text: str, max_depth: int) -> bool:
    depth = 0
    for bracket in _BRACKET.finditer(_STRING.sub("", text)):
        if bracket.group() in "[{":
            depth += 1
            if depth > max_depth:
                return True
        else:
            depth -= 1
    return False


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
