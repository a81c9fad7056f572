"""Ariadne's own keyword options, typed as Ariadne types them, for the helpers of
:mod:`quotaql.ariadne` that pass them on (typing only)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    from datetime import timedelta
    from logging import Logger, LoggerAdapter

    from ariadne.explorer import Explorer
    from ariadne.types import (
        ContextValue,
        ErrorFormatter,
        Extensions,
        Middlewares,
        OnComplete,
        OnConnect,
        OnDisconnect,
        OnOperation,
        QueryParser,
        QueryValidator,
        RootValue,
        ValidationRules,
    )
    from graphql import MiddlewareManager


class _HTTPOptions(TypedDict, total=False):
    """``GraphQLHTTPHandler``'s (not ``subscription_handlers``: the limiter refuses them)."""

    extensions: Extensions | None
    middleware: Middlewares | None
    middleware_manager_class: type[MiddlewareManager] | None


class _WebsocketOptions(TypedDict, total=False):
    """What both websocket handlers take."""

    on_connect: OnConnect | None
    on_disconnect: OnDisconnect | None
    on_operation: OnOperation | None
    on_complete: OnComplete | None


class _TransportWSOptions(_WebsocketOptions, total=False):
    """``GraphQLTransportWSHandler``'s."""

    connection_init_wait_timeout: timedelta


class _WSOptions(_WebsocketOptions, total=False):
    """``GraphQLWSHandler``'s (graphql-ws)."""

    keepalive: float | None


class _EitherWebsocketOptions(_TransportWSOptions, _WSOptions, total=False):
    """Either handler's (the overloads of :meth:`CostLimiter.websocket_handler` say which)."""


class _AppOptions(TypedDict, total=False):
    """What ``ariadne.asgi.GraphQL`` and ``ariadne.wsgi.GraphQL`` both take."""

    context_value: ContextValue | None
    root_value: RootValue | None
    query_parser: QueryParser | None
    query_validator: QueryValidator | None
    validation_rules: ValidationRules | None
    execute_get_queries: bool
    debug: bool
    introspection: bool
    explorer: Explorer | None
    error_formatter: ErrorFormatter
    execution_context_class: type[Any] | None  # graphql-core's ExecutionContext (Executor in 3.3)


class _ASGIOptions(_AppOptions, total=False):
    """``ariadne.asgi.GraphQL``'s (not its two handlers: :meth:`CostLimiter.asgi` makes them)."""

    logger: str | Logger | LoggerAdapter[Any] | None


class _WSGIOptions(_AppOptions, _HTTPOptions, total=False):
    """``ariadne.wsgi.GraphQL``'s."""

    logger: str | None
