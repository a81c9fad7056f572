"""A request body cap for ASGI servers, whose frameworks have none of their own.

Django (``DATA_UPLOAD_MAX_MEMORY_SIZE``), Flask and Quart (``MAX_CONTENT_LENGTH``), aiohttp
(``client_max_size``), Litestar (``request_max_body_size``) and Sanic (``REQUEST_MAX_SIZE``)
cap a request's body themselves; Starlette, FastAPI, Strawberry's and Ariadne's ASGI apps do
not, and uvicorn reads whatever a client sends. :class:`BodyLimit` refuses a body larger than
``max_bytes`` before the application reads it whole: by its ``Content-Length`` at once, or,
for a chunked body, as soon as the chunks pass the limit. The answer is HTTP 413 with a
GraphQL error (``REQUEST_TOO_LARGE``); nothing is parsed, nothing is charged.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, MutableMapping

    Scope = MutableMapping[str, Any]
    Message = MutableMapping[str, Any]
    Receive = Callable[[], Awaitable[Message]]
    Send = Callable[[Message], Awaitable[None]]
    ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

__all__ = ["DEFAULT_MAX_BYTES", "REQUEST_TOO_LARGE", "BodyLimit"]

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
