"""How each integration's default ``info.context`` exposes the client, headers and response.

``ACCESS[integration]`` reads the socket peer's address and a request header (every value,
case-insensitively) and sets the HTTP status and a response header, each through the
framework's own API. Contexts are the integrations' defaults (a dict, or an object for
Django; FastAPI's and Litestar's ``BaseContext`` objects work too); the peer address works
for WebSocket contexts where the integration has them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["ACCESS", "ContextAccess", "context_value", "split_values"]


@dataclass(frozen=True, slots=True)
class ContextAccess:
    """Per-integration accessors of ``info.context``.

    Attributes:
        peer_host: The socket peer's IP address, as the framework reports it.
        header_values: Every value of a request header (any case), as the framework gives
            them: WSGI servers and Django join repeated headers with commas.
        set_status: Sets the HTTP status of the response.
        set_header: Sets (replaces) a response header.
    """

    peer_host: Callable[[Any], str]
    header_values: Callable[[Any, str], list[str]]
    set_status: Callable[[Any, int], None]
    set_header: Callable[[Any, str, str], None]


def split_values(values: list[str]) -> list[str]:
    """``["a, b", "c"]`` -> ``["a", "b", "c"]``: the list a repeated header stands for."""
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def context_value(context: Any, key: str) -> Any:
    """``context[key]`` for dict contexts, ``context.key`` for objects (None when absent)."""
    if isinstance(context, Mapping):
        return context.get(key)
    return getattr(context, key, None)


_get = context_value


def _request(context: Any) -> Any:
    return _get(context, "request")


def _response(context: Any) -> Any:
    return _get(context, "response")


def _set_status_code(context: Any, status: int) -> None:
    _response(context).status_code = status


def _set_header_item(context: Any, name: str, value: str) -> None:
    _response(context).headers[name] = value


def _set_plain_dict_header(context: Any, name: str, value: str) -> None:
    # TemporalResponse.headers and Litestar's Response.headers are plain dicts: keys are
    # case-sensitive, so an earlier spelling of the same header must go first.
    headers = _response(context).headers
    for key in [key for key in headers if key.lower() == name.lower()]:
        del headers[key]
    headers[name] = value


def _one_value(value: str | None) -> list[str]:
    return [] if value is None else [value]


# Starlette (asgi, fastapi): Request and WebSocket are both HTTPConnection.
_STARLETTE = ContextAccess(
    peer_host=lambda context: _request(context).client.host,
    header_values=lambda context, name: _request(context).headers.getlist(name),
    set_status=_set_status_code,
    set_header=_set_header_item,
)


def _litestar_connection(context: Any) -> Any:
    # HTTP: {"request", "response"}; WebSocket: {"socket"} (BaseContext: .websocket).
    return _request(context) or _get(context, "socket") or _get(context, "websocket")


_LITESTAR = ContextAccess(
    peer_host=lambda context: _litestar_connection(context).client.host,
    header_values=lambda context, name: _litestar_connection(context).headers.getall(name, []),
    set_status=_set_status_code,
    set_header=_set_plain_dict_header,
)

# StrawberryDjangoContext (a dataclass with .request / .response, also ["request"]).
_DJANGO = ContextAccess(
    peer_host=lambda context: context.request.META["REMOTE_ADDR"],
    header_values=lambda context, name: _one_value(context.request.headers.get(name)),
    set_status=_set_status_code,
    set_header=lambda context, name, value: context.response.__setitem__(name, value),
)

# Werkzeug's Request (Flask) and Quart's Request / Websocket.
_WERKZEUG = ContextAccess(
    peer_host=lambda context: _request(context).remote_addr,
    header_values=lambda context, name: _request(context).headers.getlist(name),
    set_status=_set_status_code,
    set_header=_set_header_item,
)


def _aiohttp_set_status(context: Any, status: int) -> None:
    # web.Response.status is read-only and there is no status_code: set_status() it is.
    _response(context).set_status(status)


_AIOHTTP = ContextAccess(
    peer_host=lambda context: _request(context).remote,
    header_values=lambda context, name: _request(context).headers.getall(name, []),
    set_status=_aiohttp_set_status,
    set_header=_set_header_item,
)

_SANIC = ContextAccess(
    peer_host=lambda context: _request(context).ip,
    header_values=lambda context, name: _request(context).headers.getall(name, []),
    set_status=_set_status_code,
    set_header=_set_plain_dict_header,
)


def _channels_scope(context: Any) -> Any:
    # HTTP: ChannelsRequest(consumer, body); WebSocket: the GraphQLWSConsumer itself.
    request = _request(context)
    return getattr(request, "consumer", request).scope


def _channels_header_values(context: Any, name: str) -> list[str]:
    # ChannelsRequest.headers is a dict (the last repeated value wins): read the raw scope.
    wanted = name.lower().encode("latin-1")
    return [
        value.decode("latin-1")
        for key, value in _channels_scope(context)["headers"]
        if key.lower() == wanted
    ]


_CHANNELS = ContextAccess(
    peer_host=lambda context: _channels_scope(context)["client"][0],
    header_values=_channels_header_values,
    set_status=_set_status_code,
    set_header=_set_plain_dict_header,
)

# Chalice's Request: API Gateway's requestContext.identity.sourceIp (chalice local: see
# tests.support.frameworks.ChaliceServer); headers is a CaseInsensitiveMapping of one value.
_CHALICE = ContextAccess(
    peer_host=lambda context: _request(context).context["identity"]["sourceIp"],
    header_values=lambda context, name: _one_value(_request(context).headers.get(name)),
    set_status=_set_status_code,
    set_header=_set_plain_dict_header,
)

ACCESS: dict[str, ContextAccess] = {
    "asgi": _STARLETTE,
    "fastapi": _STARLETTE,
    "django": _DJANGO,
    "django-async": _DJANGO,
    "flask": _WERKZEUG,
    "aiohttp": _AIOHTTP,
    "litestar": _LITESTAR,
    "sanic": _SANIC,
    "quart": _WERKZEUG,
    "channels": _CHANNELS,
    "chalice": _CHALICE,
}
