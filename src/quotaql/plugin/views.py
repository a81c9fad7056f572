"""Strawberry's HTTP views with the request's JSON screened before they parse it.

Every Strawberry integration reads the request body itself and parses it with
``json.loads``: a body nested 50,000 deep, a body of ``null``, a JSON string or number, or
invalid UTF-8 answered 500 with a traceback on each of the eleven, and so did a GET whose
``variables`` nest 1,500 deep, all before the :class:`~quotaql.plugin.CostLimiter` saw the
request (tests/adapters/integrations/test_bodies.py). :func:`screened` makes a view (or
FastAPI's router, Litestar's controller, a Channels consumer) that parses through
:func:`quotaql.asgi.read_body` instead: such a request is answered 400 with a GraphQL error
(``INVALID_REQUEST_BODY``, ``extensions.reason``), and the client pays ``[limits]
min_charge`` to the schema's ``CostLimiter``, as for a document that does not parse.

Example::

    from strawberry.django.views import GraphQLView
    from quotaql.plugin.views import screened

    urlpatterns = [path("graphql", screened(GraphQLView).as_view(schema=schema))]

The same for ``strawberry.flask.views.GraphQLView``, ``strawberry.quart.views``,
``strawberry.sanic.views``, ``strawberry.aiohttp.views``, ``strawberry.chalice.views``,
``strawberry.asgi.GraphQL``, ``strawberry.fastapi.GraphQLRouter``,
``strawberry.channels.GraphQLHTTPConsumer`` (and their async and sync variants), the
controller ``strawberry.litestar.make_graphql_controller`` returns, and Channels'
``GraphQLWSConsumer``. A view's websocket messages are screened too (a message nested
50,000 deep killed the connection with a ``RecursionError``): one refused closes the
connection as Strawberry closes it on a message that is not JSON (4400).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, TypeVar, cast

from strawberry.http.async_base_view import AsyncBaseHTTPView
from strawberry.http.base import BaseView
from strawberry.http.sync_base_view import SyncBaseHTTPView
from strawberry.types import ExecutionResult

from quotaql import web
from quotaql.asgi import InvalidBody, ScreensBodies, charge_body, charge_body_async
from quotaql.plugin.extension import CostLimiter

if TYPE_CHECKING:
    from collections.abc import Mapping

    from quotaql.gate import Gate

__all__ = ["AsyncScreenedView", "ScreenedView", "screened"]

View = TypeVar("View", bound=type)


class _Screens(ScreensBodies, BaseView[Any]):
    """What both colours share: the JSON a view parses, screened first."""

    def parse_json(self, data: str | bytes) -> Any:
        """The body (or a multipart ``operations`` / ``map`` field): an operation or a batch.

        Raises:
            InvalidBody: it is not one (the view answers 400).
        """
        return self._decoded(self.read_json(data), data)

    def parse_query_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """A GET request's parameters; ``variables`` and ``extensions`` must be JSON
        objects (or null) within the depth."""
        parsed = dict(params)
        for name in ("variables", "extensions"):
            text = parsed.get(name)
            if text and isinstance(text, str | bytes):
                value = self.read_json(text, parameter=True)
                parsed[name] = self._decoded(value, text)
        return parsed

    def decode_json(self, data: str | bytes) -> object:
        """A websocket message (the HTTP body and GET parameters come through
        :meth:`parse_json`): screened too, an object within the bounds. A refused one is
        JSON Strawberry cannot parse (it closes the connection, 4400), not the
        ``RecursionError`` that killed the connection with a traceback."""
        try:
            return self.read_json(data, parameter=True)
        except InvalidBody as refusal:
            raise json.JSONDecodeError(refusal.message, "", 0) from None

    def _decoded(self, value: Any, data: str | bytes) -> Any:
        """The screen's own parse, unless the view decodes JSON its own way."""
        if type(self).decode_json is _Screens.decode_json:
            return value
        return self.decode_json(data)

    def _refused(self, refusal: InvalidBody, request: Any, sub_response: Any) -> ExecutionResult:
        """The answer to a refused request: status 400 and the error, as a result (and no
        Django warning per response: quotaql logs its refusals itself, rate-limited)."""
        web.set_status(sub_response, refusal.status)
        web.quiet_refusal(request)
        return ExecutionResult(data=None, errors=[refusal.graphql_error()])

    def _gate(self) -> Gate | None:
        """The gate of the schema's :class:`~quotaql.plugin.CostLimiter`, if it has one."""
        for extension in getattr(self.schema, "extensions", ()):
            if isinstance(extension, CostLimiter):
                return extension.gate
        return None


class ScreenedView(_Screens, SyncBaseHTTPView[Any, Any, Any, Any, Any]):
    """A mixin for a sync Strawberry view (Django's, Flask's, Chalice's, Channels'
    ``SyncGraphQLHTTPConsumer``): ``class View(ScreenedView, GraphQLView)``, or
    :func:`screened`."""

    def parse_http_body(self, request: Any) -> Any:
        try:
            return super().parse_http_body(request)
        except UnicodeDecodeError:  # Django's and Flask's adapters decode the body first
            raise InvalidBody("not_utf8") from None

    def execute_operation(
        self, request: Any, context: Any, root_value: Any, sub_response: Any
    ) -> ExecutionResult | list[ExecutionResult]:
        # The sync views parse the body here, before they execute.
        try:
            return super().execute_operation(
                request=request, context=context, root_value=root_value,
                sub_response=sub_response,
            )  # fmt: skip
        except InvalidBody as refusal:
            gate = self._gate()
            if gate is not None:
                charge_body(gate, refusal, request=request, context=context)
            return self._refused(refusal, request, sub_response)


class _Refused:
    """What :meth:`AsyncScreenedView.parse_http_body` hands on for a refused request
    (Strawberry's async ``run`` gives it to ``execute_operation``)."""

    __slots__ = ("refusal",)

    def __init__(self, refusal: InvalidBody) -> None:
        self.refusal = refusal


class AsyncScreenedView(_Screens, AsyncBaseHTTPView[Any, Any, Any, Any, Any, Any, Any]):
    """A mixin for an async Strawberry view (ASGI, FastAPI, Litestar, aiohttp, Sanic,
    Quart, Django's and Flask's async views, Channels' ``GraphQLHTTPConsumer``):
    ``class View(AsyncScreenedView, GraphQLView)``, or :func:`screened`."""

    async def parse_http_body(self, request: Any) -> Any:
        try:
            return await super().parse_http_body(request)
        except InvalidBody as refusal:
            return _Refused(refusal)

    async def execute_operation(
        self,
        request: Any,
        request_adapter: Any,
        request_data: Any,
        context: Any,
        root_value: Any,
        sub_response: Any,
    ) -> Any:
        if not isinstance(request_data, _Refused):
            return await super().execute_operation(
                request=request, request_adapter=request_adapter, request_data=request_data,
                context=context, root_value=root_value, sub_response=sub_response,
            )  # fmt: skip
        refusal = request_data.refusal
        gate = self._gate()
        if gate is not None:
            await charge_body_async(gate, refusal, request=request, context=context)
        return self._refused(refusal, request, sub_response)


def screened(view_class: View) -> View:
    """``view_class`` (a Strawberry view, router, controller or HTTP consumer) with the
    request's JSON screened (see the module); ``max_body_depth`` and ``max_body_values``
    are its class attributes.

    Raises:
        TypeError: ``view_class`` is not one of Strawberry's HTTP views.
    """
    mixin: type
    if issubclass(view_class, AsyncBaseHTTPView):
        mixin = AsyncScreenedView
    elif issubclass(view_class, SyncBaseHTTPView):
        mixin = ScreenedView
    else:
        raise TypeError(f"screened() takes a Strawberry HTTP view class, got {view_class!r}")
    if issubclass(view_class, mixin):
        return view_class
    namespace = {"__module__": view_class.__module__, "__qualname__": view_class.__qualname__}
    return cast("View", type(view_class.__name__, (mixin, view_class), namespace))
