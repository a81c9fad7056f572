"""ASGI helpers: a request body cap, and a lifespan that flushes quotaql at shutdown.

**Body cap.**
Django (``DATA_UPLOAD_MAX_MEMORY_SIZE``), Flask and Quart (``MAX_CONTENT_LENGTH``), aiohttp
(``client_max_size``), Litestar (``request_max_body_size``) and Sanic (``REQUEST_MAX_SIZE``)
cap a request's body themselves; Starlette, FastAPI, Strawberry's and Ariadne's ASGI apps do
not, and uvicorn reads whatever a client sends. :class:`BodyLimit` refuses a body larger than
``max_bytes`` before the application reads it whole: by its ``Content-Length`` at once, or,
for a chunked body, as soon as the chunks pass the limit. The answer is HTTP 413 with a
GraphQL error (``REQUEST_TOO_LARGE``); nothing is parsed, nothing is charged.

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
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, MutableMapping, Sequence

    Scope = MutableMapping[str, Any]
    Message = MutableMapping[str, Any]
    Receive = Callable[[], Awaitable[Message]]
    Send = Callable[[Message], Awaitable[None]]
    ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

__all__ = ["DEFAULT_MAX_BYTES", "REQUEST_TOO_LARGE", "BodyLimit", "Lifespan", "serve_lifespan"]

#: A GraphQL request within the default document limits (``max_length`` = 100,000
#: characters) with room for its variables; file uploads need more.
DEFAULT_MAX_BYTES = 1_048_576
REQUEST_TOO_LARGE = "REQUEST_TOO_LARGE"


class BodyLimit:
    """``BodyLimit(app, max_bytes)``: ``app`` with HTTP request bodies capped at ``max_bytes``.

    Example::

        app = BodyLimit(GraphQL(schema), max_bytes=256_000)  # uvicorn module:app

    Websockets and lifespan events pass through untouched.
    """

    def __init__(self, app: ASGIApp, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise ValueError(f"max_bytes must be an integer >= 0, got {max_bytes!r}")
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = _content_length(scope)
        if length is not None and length > self.max_bytes:
            await self._refuse(send)
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

    async def _refuse(self, send: Send) -> None:
        body = json.dumps(
            {
                "data": None,
                "errors": [
                    {
                        "message": f"The request body is larger than {self.max_bytes} bytes.",
                        "extensions": {"code": REQUEST_TOO_LARGE, "limit": self.max_bytes},
                    }
                ],
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
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
    flushed at shutdown.

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
    """Answer one ASGI lifespan scope: started at once; at shutdown, each gate flushed
    (a flush that fails is reported as the shutdown's failure, after the others ran)."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
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
