"""What quotaql reads from and writes to the web frameworks' request and response objects.

Duck typing only: no framework is imported here. Every Strawberry integration (ASGI,
FastAPI, Django, Flask, aiohttp, Litestar, Sanic, Quart, Channels, Chalice), Ariadne and a
plain ASGI scope or WSGI environ keep the client's address, the request headers and the
response status in their own places; these functions know each of them, so that the gate
and its adapters never branch on the framework.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "authenticated_user",
    "connection_params",
    "context_item",
    "header",
    "header_values",
    "is_websocket",
    "keep_connection_params",
    "peer_address",
    "principal_may_await",
    "quiet_refusal",
    "request_of",
    "response_of",
    "set_headers",
    "set_status",
]

# A header value longer than this is cut to its last MAX_HEADER_LENGTH characters (proxy
# headers are read from the right; no key is this long): a hostile megabyte header must not
# cost more than a short one.
MAX_HEADER_LENGTH = 8192


def context_item(context: Any, name: str) -> Any:
    """``context[name]`` for dict contexts, ``context.name`` for context objects."""
    if type(context) is dict:  # the common case, without an ABC check
        return context.get(name)
    if isinstance(context, Mapping):
        return context.get(name)
    return getattr(context, name, None)


def keep_connection_params(connection: Any, payload: Any) -> None:
    """Keep a websocket's ``connection_init`` payload in its ASGI scope, for adapters whose
    framework keeps it nowhere (Ariadne): the first one only (a second one is refused)."""
    scope = getattr(connection, "scope", None)
    if isinstance(scope, dict) and isinstance(payload, Mapping):
        scope.setdefault(_CONNECTION_PARAMS, payload)


def connection_params(context: Any, request: Any) -> Mapping[Any, Any] | None:
    """The ``connection_init`` payload of a websocket operation: Strawberry's context keeps
    it as ``connection_params``; :func:`keep_connection_params` keeps it in the scope."""
    params = context_item(context, "connection_params")
    if isinstance(params, Mapping):
        return params
    if not is_websocket(request):  # (Sanic's request.scope raises outside ASGI)
        return None
    scope = getattr(request, "scope", None)
    params = scope.get(_CONNECTION_PARAMS) if isinstance(scope, dict) else None
    return params if isinstance(params, Mapping) else None


_CONNECTION_PARAMS = "quotaql.connection_params"


def request_of(context: Any) -> Any:
    """The request (or websocket) a GraphQL context carries, or None.

    ``context["request"]`` / ``context.request`` on every integration; Litestar's websocket
    context calls it ``socket``, FastAPI's ``websocket``.
    """
    if context is None:
        return None
    for name in ("request", "socket", "websocket"):
        found = context_item(context, name)
        if found is not None:
            return found
    return None


def response_of(context: Any) -> Any:
    """The response a resolver may set a status and headers on, or None (a websocket)."""
    if context is None:
        return None
    response = context_item(context, "response")
    return None if response is None or is_websocket(response) else response


def is_websocket(obj: Any) -> bool:
    """A websocket connection (Starlette, aiohttp, Litestar, Quart, Channels): no status,
    no headers once open."""
    kind = type(obj)
    found = _WEBSOCKET_TYPES.get(kind)
    if found is None:
        found = any(
            "websocket" in name or name.endswith("wsconsumer")
            for name in (cls.__name__.lower() for cls in kind.__mro__)
        )
        if len(_WEBSOCKET_TYPES) >= 256:  # types made on the fly: never unbounded
            _WEBSOCKET_TYPES.clear()
        _WEBSOCKET_TYPES[kind] = found
    return found


# What is_websocket found for each type (a response's type is asked on every operation).
_WEBSOCKET_TYPES: dict[type, bool] = {}


# -- request headers ----------------------------------------------------------------------


def header_values(request: Any, name: str) -> list[str]:
    """Every value of the request header ``name`` (any case), in the order received.

    Frameworks that join repeated headers into one value (WSGI, Django) give one item;
    callers that need each element of a list header split on commas themselves. Chalice's
    local server keeps only the first of repeated header lines: nothing else reaches here.
    """
    lowered = name.lower()
    scope = _consumer_scope(request)
    if scope is not None:
        return _raw_header_values(scope, lowered)
    headers = getattr(request, "headers", None)
    if headers is None:
        return _raw_header_values(request, lowered)
    values: Any = None
    for method in ("getlist", "getall", "get_all"):  # Starlette/werkzeug, multidict, email
        getter = getattr(headers, method, None)
        # Sanic's Header answers any attribute with the header of that name ("" when
        # absent): only a callable is the multi-value getter.
        if callable(getter):
            try:
                values = getter(lowered)
            except (KeyError, TypeError):  # multidict's getall without a default
                values = []
            break
    else:
        value = headers.get(lowered) if hasattr(headers, "get") else None
        values = [] if value is None else [value]
    return [_text(value) for value in values or () if value is not None]


def header(request: Any, name: str) -> str | None:
    """The first value of the request header ``name`` (any case), or None."""
    if request is None:
        return None
    if getattr(request, "consumer", None) is not None:  # (most requests have none)
        scope = _consumer_scope(request)
        if scope is not None:
            values = _raw_header_values(scope, name.lower())
            return values[0] if values else None
    headers = getattr(request, "headers", None)
    if headers is not None and hasattr(headers, "get"):
        value = headers.get(name.lower())
        return None if value is None else _text(value)
    values = _raw_header_values(request, name.lower())
    return values[0] if values else None


def _consumer_scope(request: Any) -> Mapping[str, Any] | None:
    """The ASGI scope of Strawberry's Channels request (``request.consumer.scope``).

    Its ``headers`` is a dict built from the scope, where a repeated header keeps only its
    last value (the last ``X-Forwarded-For`` line, say): the scope has them all.
    """
    consumer = getattr(request, "consumer", None)
    scope = getattr(consumer, "scope", None) if consumer is not None else None
    return scope if isinstance(scope, Mapping) else None


def _raw_header_values(request: Any, lowered: str) -> list[str]:
    """Headers of a bare ASGI scope or WSGI environ."""
    if not isinstance(request, Mapping):
        return []
    raw = request.get("headers")
    if isinstance(raw, list | tuple):  # an ASGI scope: [(b"name", b"value"), ...]
        wanted = lowered.encode("latin-1")
        return [_text(value) for key, value in raw if bytes(key).lower() == wanted]
    value = request.get("HTTP_" + lowered.upper().replace("-", "_"))  # a WSGI environ
    return [] if value is None else [_text(value)]


def _text(value: object) -> str:
    if isinstance(value, bytes | bytearray):
        value = bytes(value).decode("latin-1")
    text = str(value)
    return text[-MAX_HEADER_LENGTH:] if len(text) > MAX_HEADER_LENGTH else text


# -- who is asking ------------------------------------------------------------------------


def peer_address(request: Any) -> str | None:
    """The address of the socket peer that sent ``request``, as its framework reports it.

    Where the framework or its server was configured to take the address from proxy
    headers (werkzeug's ``ProxyFix``, aiohttp-remotes, uvicorn's ``--proxy-headers``),
    that is what it reports; quotaql's own ``trusted_proxies`` start from this address.
    """
    if request is None:
        return None
    meta = getattr(request, "META", None)  # Django (sync and async views)
    if isinstance(meta, Mapping):
        return _address(meta.get("REMOTE_ADDR"))
    consumer = getattr(request, "consumer", None)  # Strawberry's Channels request
    if consumer is not None:
        return _scope_client(getattr(consumer, "scope", None))
    if getattr(request, "conn_info", None) is not None:  # Sanic: .ip is the socket peer
        return _address(getattr(request, "ip", None))
    client = getattr(request, "client", None)  # Starlette, FastAPI, Litestar
    if client is not None and not isinstance(client, Mapping):
        host = getattr(client, "host", None)
        if host is None and isinstance(client, tuple) and client:
            host = client[0]
        return _address(host)
    for name in ("remote_addr", "remote"):  # werkzeug (Flask), Quart; aiohttp
        value = getattr(request, name, None)
        if isinstance(value, str):
            return _address(value)
    chalice = getattr(request, "context", None)  # Chalice: API Gateway's request context
    if isinstance(chalice, Mapping):
        identity = chalice.get("identity")
        if isinstance(identity, Mapping):
            return _address(identity.get("sourceIp"))
    if isinstance(request, Mapping):
        if "REMOTE_ADDR" in request:  # a WSGI environ
            return _address(request.get("REMOTE_ADDR"))
        return _scope_client(request)  # an ASGI scope
    scope = getattr(request, "scope", None)
    if isinstance(scope, Mapping):
        return _scope_client(scope)
    return None


def _scope_client(scope: Any) -> str | None:
    if not isinstance(scope, Mapping):
        return None
    client = scope.get("client")
    if isinstance(client, list | tuple) and client:
        return _address(client[0])
    return None


def _address(value: object) -> str | None:
    if not isinstance(value, str) or not value:
        return None
    return value[:256]


def has_authenticated_user(request: Any) -> bool:
    """Whether :func:`authenticated_user` may find one: a Django request (cheap to ask)."""
    return request is not None and isinstance(getattr(request, "META", None), Mapping)


def authenticated_user(request: Any, can_await: bool) -> Any:
    """The authenticated principal's id the framework knows, or None (or an awaitable of it).

    Django: ``request.user`` when it is authenticated, by its primary key (in an async
    view, ``request.auser()``, which is awaited: ``request.user`` would query the database
    from the event loop). Other frameworks have no standard place: pass a ``principal``
    hook instead. It may raise (the session store is down): the caller contains it.
    """
    if not has_authenticated_user(request):
        return None
    if can_await:
        auser = getattr(request, "auser", None)
        if callable(auser):
            return _django_user_id_async(auser)
    if "user" not in getattr(request, "__dict__", {}) and not hasattr(type(request), "user"):
        return None  # no AuthenticationMiddleware
    return _django_user_id(getattr(request, "user", None))


def principal_may_await(request: Any = None) -> bool:
    """Whether :func:`authenticated_user` may answer with an awaitable on an event loop:
    Django is loaded (an async view reads the user with ``request.auser()``), and
    ``request``, when known, is one that has ``auser`` (a Starlette request or websocket,
    a WSGI environ never awaits, whatever else the process imported)."""
    if "django" not in sys.modules:
        return False
    return request is None or callable(getattr(request, "auser", None))


async def _django_user_id_async(auser: Any) -> str | None:
    return _django_user_id(await auser())


def _django_user_id(user: Any) -> str | None:
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    pk = getattr(user, "pk", None)
    return None if pk is None else str(pk)


# -- the response -------------------------------------------------------------------------


def set_status(response: Any, status: int) -> None:
    """Set the HTTP status of ``response`` (nothing for None or a websocket)."""
    if response is None or is_websocket(response):
        return
    setter = getattr(response, "set_status", None)  # aiohttp: .status is read-only
    if callable(setter):
        setter(status)
    elif hasattr(response, "status_code"):
        response.status_code = status


def set_headers(response: Any, headers: Mapping[str, str], *, remove: Sequence[str] = ()) -> None:
    """Set ``headers`` on ``response``, replacing earlier values, and drop the ``remove``
    headers it does not set (nothing on a websocket)."""
    if (not headers and not remove) or response is None or is_websocket(response):
        return
    target = getattr(response, "headers", None)
    if target is None:
        return
    cls = type(target)
    if cls.__name__ == "MutableHeaders" and cls.__module__ == "starlette.datastructures":
        _set_raw(target.raw, headers, remove)  # one pass over its list, not one per header
        return
    for name, value in headers.items():
        target[name] = value
    for name in remove:
        if name not in headers:
            with contextlib.suppress(KeyError):
                del target[name]


def _set_raw(
    raw: list[tuple[bytes, bytes]], headers: Mapping[str, str], remove: Sequence[str]
) -> None:
    """Starlette's ``MutableHeaders.__setitem__`` for each of ``headers`` (and ``del`` for
    each of ``remove`` they do not set), in one pass over its raw list."""
    # Plain loops: this runs on every response, and each comprehension is a call.
    encoded = []
    dropped = set()
    for name, value in headers.items():
        key = name.lower().encode("latin-1")
        encoded.append((key, value.encode("latin-1")))
        dropped.add(key)
    for name in remove:
        dropped.add(name.lower().encode("latin-1"))
    for key, _ in raw:
        if key in dropped:
            raw[:] = [item for item in raw if item[0] not in dropped]
            break
    raw.extend(encoded)


# -- the frameworks' own logs -------------------------------------------------------------


class _RefusedByQuotaql(logging.Filter):
    """Drops Django's per-response WARNING (``django.request``: "Too Many Requests:
    /graphql") for a response quotaql refused: quotaql logs its refusals itself, with fields
    and rate-limited, so that a flood of refused requests cannot flood the logs."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(getattr(record, "request", None), "quotaql_refused", False)


_DJANGO_REFUSALS = _RefusedByQuotaql()


def quiet_refusal(request: Any) -> None:
    """Mark ``request`` as refused by quotaql, so the framework's own per-response warning
    for it is dropped (Django's ``django.request`` logger; other frameworks log no such
    line, or only the server's access line)."""
    if request is None or not isinstance(getattr(request, "META", None), Mapping):
        return  # only Django writes a warning per 4xx response
    try:
        request.quotaql_refused = True
    except AttributeError:  # pragma: no cover  (Django's requests take attributes)
        return
    logging.getLogger("django.request").addFilter(_DJANGO_REFUSALS)  # idempotent
