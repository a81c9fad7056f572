"""A Strawberry schema served for real, on loopback, under each HTTP integration's own server.

Every server binds ``127.0.0.1`` on a port the kernel picks (never 6379, where the machine's
own Redis may listen), is ready when ``with`` hands it over, and is stopped on exit: threads
joined, subprocesses terminated then killed, every wait bounded. Clients may connect from any
loopback source address (``httpx.HTTPTransport(local_address="127.0.0.2")``); no server trusts
``X-Forwarded-For`` / ``Forwarded``, so the address a framework reports is the socket peer.

Example::

    with serve("flask", schema) as server:
        httpx.post(server.url, json={"query": "{ hello }"})

``SERVERS`` maps each integration name to its server class; each takes the schema (a
``strawberry.Schema`` or a ``"module:attribute"`` import path), an optional
``context_getter``, ``screened`` (quotaql's body screen, ``quotaql.plugin.views.screened``)
and keyword options for Strawberry's view (``graphql_ide=None``, ...).
The processes, threads and sockets under them are those of ``servers.py`` and
``app_servers.py``.
"""

from __future__ import annotations

import abc
import asyncio
import atexit
import collections
import contextlib
import functools
import importlib
import inspect
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Self

from tests.support.app_servers import (
    ServerThread,
    ServingThread,
    UvicornServer,
    WSGIServer,
    wait_started,
)
from tests.support.servers import (
    HOST,
    STOP_TIMEOUT,
    SYSTEM_REDIS_PORT,
    answers_http,
    bind_loopback,
    spawn,
    terminate,
)

if TYPE_CHECKING:
    import socket
    from collections.abc import Callable, Mapping
    from types import TracebackType

    import strawberry

__all__ = [
    "HOST",
    "SERVERS",
    "LiveServer",
    "ServerStartupError",
    "configure_django",
    "load",
    "serve",
]

GRAPHQL_PATH = "/graphql"
STARTUP_TIMEOUT = 20.0
_REPO_ROOT = Path(__file__).resolve().parents[2]

# Django's ROOT_URLCONF (this module): empty, every server routes through its own urlconf.
urlpatterns: list[Any] = []


class ServerStartupError(RuntimeError):
    """A server did not come up in time; the message carries the tail of its log."""


def load(target: Any) -> Any:
    """``"package.module:attribute"`` -> that object; anything else is returned as it is."""
    if not isinstance(target, str):
        return target
    module_name, _, attribute = target.partition(":")
    if not attribute:
        msg = f"expected 'module:attribute', got {target!r}"
        raise ValueError(msg)
    value: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        value = getattr(value, part)
    return value


def _bound_not_on_redis_port(factory: Callable[[], Any]) -> Any:
    """Build a ``socketserver`` that binds port 0 in its constructor again if it drew 6379."""
    while True:
        server = factory()
        if server.server_address[1] != SYSTEM_REDIS_PORT:
            return server
        server.server_close()  # pragma: no cover


def _with_context_getter(view_class: type, getter: Callable[..., Any] | None) -> type:
    """A subclass of a Strawberry view whose ``get_context`` calls ``getter(request, response)``.

    Async views await the getter's result when it is awaitable; sync views call it as it is.
    """
    if getter is None:
        return view_class
    if inspect.iscoroutinefunction(view_class.get_context):

        class AsyncContextView(view_class):  # type: ignore[misc,valid-type]
            async def get_context(self, request: Any, response: Any) -> Any:
                context = getter(request, response)
                return await context if inspect.isawaitable(context) else context

        return AsyncContextView

    class SyncContextView(view_class):  # type: ignore[misc,valid-type]
        def get_context(self, request: Any, response: Any) -> Any:
            return getter(request, response)

    return SyncContextView


def _screened(view_class: Any, options: dict[str, Any]) -> Any:
    """``view_class`` with quotaql's body screen (``quotaql.plugin.views.screened``) when
    the option ``screened`` (taken out of ``options``) is true."""
    if not options.pop("screened", False):
        return view_class
    from quotaql.plugin.views import screened

    return screened(view_class)


def _view(view_class: type, options: dict[str, Any]) -> type:
    """The view class a server uses: ``view_class``, screened (``screened=True``), with the
    ``context_getter`` option (both options taken out of ``options``)."""
    view_class = _screened(view_class, options)
    return _with_context_getter(view_class, options.pop("context_getter", None))


class _LogBuffer(logging.Handler):
    """Keeps the last records of the root logger (where every framework's loggers end up)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: collections.deque[str] = collections.deque(maxlen=400)
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            self.lines.append(self.format(record))


class LiveServer(abc.ABC):
    """One integration serving one schema on loopback; use it as a context manager.

    Attributes:
        integration: The integration's name (a key of ``SERVERS``).
        websockets: Whether the integration serves GraphQL over WebSocket at ``ws_url``.
        port: The TCP port, known once the server has started.
    """

    integration: ClassVar[str]
    websockets: ClassVar[bool] = False

    def __init__(self, schema: strawberry.Schema | str, **options: Any) -> None:
        self.schema = schema
        self.options = options
        self.port = 0
        self._log = _LogBuffer()

    @property
    def url(self) -> str:
        """The GraphQL endpoint, ``http://127.0.0.1:PORT/graphql``."""
        return f"http://{HOST}:{self.port}{GRAPHQL_PATH}"

    @property
    def ws_url(self) -> str:
        """The GraphQL WebSocket endpoint (where ``websockets`` is true)."""
        return f"ws://{HOST}:{self.port}{GRAPHQL_PATH}"

    def log(self) -> str:
        """What the server logged while it ran (the root logger's records, where what its
        thread raised is logged too), last lines."""
        return "\n".join(list(self._log.lines)[-60:])

    def __enter__(self) -> Self:
        logging.getLogger().addHandler(self._log)
        try:
            self._start(time.monotonic() + STARTUP_TIMEOUT)
        except BaseException:
            self._shutdown()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._shutdown()

    def _shutdown(self) -> None:
        try:
            self._stop()
        finally:
            logging.getLogger().removeHandler(self._log)

    def _startup_failed(self, why: str) -> ServerStartupError:
        return ServerStartupError(f"{self.integration} server {why}; its log:\n{self.log()}")

    def _wait_started(
        self, started: Callable[[], bool], thread: ServingThread, deadline: float
    ) -> None:
        try:
            wait_started(started, thread, deadline - time.monotonic(), "")
        except RuntimeError as exc:
            raise self._startup_failed(str(exc).strip()) from exc

    @abc.abstractmethod
    def _start(self, deadline: float) -> None:
        """Start serving; return once the server accepts requests or raise before ``deadline``."""

    @abc.abstractmethod
    def _stop(self) -> None:
        """Stop serving and release every thread, process and socket (bounded waits)."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.integration} port={self.port}>"


class _SocketServer(LiveServer):
    """A ``socketserver``-based WSGI/HTTP server (Django, Werkzeug, Chalice local) in a thread."""

    def __init__(self, schema: strawberry.Schema | str, **options: Any) -> None:
        super().__init__(schema, **options)
        self._serving: ServerThread | None = None

    @abc.abstractmethod
    def _server(self) -> ServerThread:
        """A bound, listening server with its application, not serving yet."""

    def _start(self, deadline: float) -> None:
        self._serving = self._server()
        self.port = self._serving.port
        # The socket listens since the constructor: connections queue until it serves.
        self._serving.start()

    def _stop(self) -> None:
        serving, self._serving = self._serving, None
        if serving is not None:
            serving.stop()


class _AsyncioServer(LiveServer):
    """A server that runs on its own event loop in a thread (aiohttp, Sanic, Hypercorn).

    ``_serve`` starts serving, sets ``self._ready`` once requests are accepted, awaits
    ``stopping`` and cleans up before it returns.
    """

    def __init__(self, schema: strawberry.Schema | str, **options: Any) -> None:
        super().__init__(schema, **options)
        self._thread: ServingThread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()

    @abc.abstractmethod
    async def _serve(self, sock: socket.socket, stopping: asyncio.Event) -> None: ...

    def _start(self, deadline: float) -> None:
        sock = bind_loopback()
        self.port = sock.getsockname()[1]

        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stopping = asyncio.Event()
            try:
                await self._serve(sock, self._stopping)
            finally:
                sock.close()

        # What the loop raises is in the server's log (as it always was), not a test error.
        self._thread = ServingThread(
            lambda: asyncio.run(main()), f"{self.integration}-server-{id(self):x}", swallow=True
        )
        self._thread.start()
        self._wait_started(self._ready.is_set, self._thread, deadline)

    def _stop(self) -> None:
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed in between
                loop.call_soon_threadsafe(stopping.set)
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.stop()


# -- uvicorn: asgi, fastapi, django-async, litestar ------------------------------------------


class _UvicornServer(LiveServer):
    """An ASGI application under uvicorn in a thread (``app_servers.UvicornServer``), with
    uvicorn's own loop choice and no logging configuration of its own.

    ``proxy_headers=False``: uvicorn's default (``True``, trusting ``FORWARDED_ALLOW_IPS``,
    127.0.0.1 by default) would replace the client address with ``X-Forwarded-For``.
    """

    lifespan: ClassVar[str] = "off"

    def __init__(self, schema: strawberry.Schema | str, **options: Any) -> None:
        super().__init__(schema, **options)
        self._server: UvicornServer | None = None

    @abc.abstractmethod
    def _app(self) -> Any:
        """The ASGI application."""

    def _start(self, deadline: float) -> None:
        self._server = UvicornServer(
            self._app(),
            startup_timeout=max(0.0, deadline - time.monotonic()),
            loop="auto",
            log_config=None,  # leave the process's logging alone; records reach the root
            lifespan=self.lifespan,
            proxy_headers=False,
            timeout_graceful_shutdown=2,
        )
        self.port = self._server.port
        try:
            self._server.start()
        except RuntimeError as exc:
            self._server = None  # it stopped itself
            raise self._startup_failed(str(exc)) from exc

    def _stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.stop()


class AsgiServer(_UvicornServer):
    """``strawberry.asgi.GraphQL`` at ``/graphql`` under uvicorn (HTTP and WebSocket)."""

    integration = "asgi"
    websockets = True

    def _app(self) -> Any:
        from strawberry.asgi import GraphQL

        options = dict(self.options)
        view_class = _view(GraphQL, options)
        # The app itself, no router: it answers on every path, /graphql among them.
        return view_class(load(self.schema), **options)


class FastAPIServer(_UvicornServer):
    """``strawberry.fastapi.GraphQLRouter`` at ``/graphql`` under uvicorn.

    ``context_getter`` is FastAPI's: a dependency whose result is merged into the context.
    """

    integration = "fastapi"
    websockets = True
    lifespan = "on"

    def _app(self) -> Any:
        from fastapi import FastAPI
        from strawberry.fastapi import GraphQLRouter

        app = FastAPI()
        options = dict(self.options)
        router_class = _screened(GraphQLRouter, options)
        app.include_router(router_class(load(self.schema), **options), prefix=GRAPHQL_PATH)
        return app


class LitestarServer(_UvicornServer):
    """``strawberry.litestar.make_graphql_controller`` at ``/graphql`` under uvicorn.

    ``context_getter`` is Litestar's: a dependency whose result is merged into the context.
    """

    integration = "litestar"
    websockets = True
    lifespan = "on"

    def _app(self) -> Any:
        from litestar import Litestar
        from litestar.exceptions import LitestarDeprecationWarning
        from strawberry.litestar import make_graphql_controller

        options = dict(self.options)
        screen = {"screened": options.pop("screened", False)}
        controller = make_graphql_controller(load(self.schema), path=GRAPHQL_PATH, **options)
        controller = _screened(controller, screen)
        with warnings.catch_warnings():
            # Strawberry's controller lets Litestar infer its `context` dependency, which
            # Litestar 2.2x deprecates (for 3.0) when the routes are registered.
            warnings.filterwarnings(
                "ignore", ".*Inferred dependency field", category=LitestarDeprecationWarning
            )
            return Litestar(route_handlers=[controller], logging_config=None)


# -- Django ----------------------------------------------------------------------------------

_django_lock = threading.Lock()


def configure_django(*, migrate: bool = True) -> None:
    """Configure Django once per process: minimal settings, auth and sessions, SQLite.

    ``request.user`` exists (sessions + authentication middleware); the database is a
    SQLite file in a temporary directory, migrated unless ``migrate`` is false.
    ``LOGGING_CONFIG = None`` leaves the process's logging alone. Each server routes through
    its own urlconf (set per request), so servers with different schemas run side by side.
    """
    from django.conf import settings

    with _django_lock:
        if settings.configured:
            return
        directory = tempfile.mkdtemp(prefix="quotaql-django-")
        atexit.register(_remove_tree, directory)
        settings.configure(
            DEBUG=False,
            ALLOWED_HOSTS=["*"],
            SECRET_KEY="quotaql-tests-only",
            ROOT_URLCONF=__name__,
            INSTALLED_APPS=[
                "django.contrib.auth",
                "django.contrib.contenttypes",
                "django.contrib.sessions",
            ],
            MIDDLEWARE=[
                "django.contrib.sessions.middleware.SessionMiddleware",
                "django.contrib.auth.middleware.AuthenticationMiddleware",
            ],
            DATABASES={
                "default": {
                    "ENGINE": "django.db.backends.sqlite3",
                    "NAME": str(Path(directory) / "db.sqlite3"),
                }
            },
            DEFAULT_AUTO_FIELD="django.db.models.AutoField",
            USE_TZ=True,
            LOGGING_CONFIG=None,
        )
        import django
        from django.core.management import call_command

        django.setup()
        if migrate:
            call_command("migrate", verbosity=0, interactive=False)


def _remove_tree(directory: str) -> None:
    import shutil

    shutil.rmtree(directory, ignore_errors=True)


def _django_urlconf(view: Any) -> Any:
    """A urlconf object (a module: hashable, as Django's resolver cache needs) for ``view``."""
    import types

    from django.urls import path

    urlconf = types.ModuleType(f"quotaql_test_urls_{id(view):x}")
    urlconf.urlpatterns = [path(GRAPHQL_PATH.lstrip("/"), view)]  # type: ignore[attr-defined]
    return urlconf


class DjangoServer(_SocketServer):
    """``strawberry.django.views.GraphQLView`` (sync) under Django's own threaded WSGI server.

    ``django.core.servers.basehttp.ThreadedWSGIServer`` with its ``WSGIRequestHandler`` is
    what ``manage.py runserver`` runs. Settings: see ``configure_django``.
    """

    integration = "django"

    def _server(self) -> ServerThread:
        configure_django()
        from django.core.handlers.wsgi import WSGIHandler
        from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler
        from strawberry.django.views import GraphQLView

        options = dict(self.options)
        view_class = _view(GraphQLView, options)
        urlconf = _django_urlconf(view_class.as_view(schema=load(self.schema), **options))

        class Handler(WSGIHandler):
            def get_response(self, request: Any) -> Any:
                request.urlconf = urlconf
                return super().get_response(request)

        def make() -> Any:
            server = ThreadedWSGIServer((HOST, 0), WSGIRequestHandler, allow_reuse_address=True)
            server.set_app(Handler())
            return server

        return ServerThread(_bound_not_on_redis_port(make))


class DjangoAsyncServer(_UvicornServer):
    """``strawberry.django.views.AsyncGraphQLView`` under uvicorn, through Django's ASGI handler."""

    integration = "django-async"

    def _app(self) -> Any:
        configure_django()
        from django.core.handlers.asgi import ASGIHandler
        from strawberry.django.views import AsyncGraphQLView

        options = dict(self.options)
        view_class = _view(AsyncGraphQLView, options)
        urlconf = _django_urlconf(view_class.as_view(schema=load(self.schema), **options))

        class Handler(ASGIHandler):
            async def get_response_async(self, request: Any) -> Any:
                request.urlconf = urlconf
                return await super().get_response_async(request)

        return Handler()


# -- Flask, Chalice --------------------------------------------------------------------------


class FlaskServer(_SocketServer):
    """``strawberry.flask.views.GraphQLView`` under Werkzeug's threaded development server."""

    integration = "flask"

    def _server(self) -> ServerThread:
        from flask import Flask
        from strawberry.flask.views import GraphQLView

        options = dict(self.options)
        view_class = _view(GraphQLView, options)
        app = Flask(f"quotaql_test_{id(self):x}")
        app.add_url_rule(
            GRAPHQL_PATH,
            view_func=view_class.as_view("graphql_view", schema=load(self.schema), **options),
        )
        return WSGIServer(app)


class ChaliceServer(_SocketServer):
    """``strawberry.chalice.views.GraphQLView`` under Chalice's local server (``chalice local``).

    Stock ``chalice local`` writes ``requestContext.identity.sourceIp = "127.0.0.1"`` for
    every request (``LambdaEventConverter.LOCAL_SOURCE_IP``), whatever the peer. By default
    this server puts the socket peer's address there instead, as API Gateway does; pass
    ``real_source_ip=False`` to keep the stock behaviour.
    """

    integration = "chalice"

    def _server(self) -> ServerThread:
        from chalice import Chalice
        from chalice.config import Config
        from chalice.local import ChaliceRequestHandler, create_local_server
        from strawberry.chalice.views import GraphQLView

        options = dict(self.options)
        real_source_ip = options.pop("real_source_ip", True)
        view_class = _view(GraphQLView, options)
        view = view_class(schema=load(self.schema), **options)
        app = Chalice(app_name=f"quotaql_test_{id(self):x}")

        @app.route(GRAPHQL_PATH, methods=["GET", "POST"], content_types=["application/json"])
        def graphql() -> Any:
            return view.execute_request(app.current_request)

        class Handler(ChaliceRequestHandler):
            def handle(self) -> None:
                if real_source_ip:
                    converter = self.local_gateway.event_converter
                    converter.LOCAL_SOURCE_IP = self.client_address[0]  # type: ignore[misc]
                super().handle()

            def log_message(self, format: str, *args: Any) -> None:
                logging.getLogger("chalice.local").info(format, *args)

        config = Config()

        def make() -> Any:
            local = create_local_server(app, config, HOST, 0)
            # Same handler arguments as create_local_server's, with the subclass above.
            local.server.RequestHandlerClass = functools.partial(
                Handler, app_object=app, config=config
            )
            return local.server

        return ServerThread(_bound_not_on_redis_port(make))


# -- aiohttp, Sanic, Quart -------------------------------------------------------------------


class AiohttpServer(_AsyncioServer):
    """``strawberry.aiohttp.views.GraphQLView`` under aiohttp's own server (AppRunner + SockSite)."""

    integration = "aiohttp"
    websockets = True

    async def _serve(self, sock: socket.socket, stopping: asyncio.Event) -> None:
        from aiohttp import web
        from strawberry.aiohttp.views import GraphQLView

        options = dict(self.options)
        view_class = _view(GraphQLView, options)
        app = web.Application()
        app.router.add_route("*", GRAPHQL_PATH, view_class(schema=load(self.schema), **options))
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=2)
        await runner.setup()
        try:
            await web.SockSite(runner, sock).start()
            self._ready.set()
            await stopping.wait()
        finally:
            await runner.cleanup()


class SanicServer(_AsyncioServer):
    """``strawberry.sanic.views.GraphQLView`` under Sanic's own server (``app.create_server``).

    Each server makes a new app with a unique name (Sanic keeps a registry of app names) and
    unregisters it on exit. ``Sanic.test_mode`` is switched on for the process, as
    sanic-testing does: at every startup Sanic's TouchUp recompiles methods of Sanic's own
    classes from their source, and a second startup in one process fails (``KeyError:
    '_run_request_middleware'``) unless test mode keeps the original methods.
    """

    integration = "sanic"

    async def _serve(self, sock: socket.socket, stopping: asyncio.Event) -> None:
        from sanic import Sanic
        from strawberry.sanic.views import GraphQLView

        options = dict(self.options)
        view_class = _view(GraphQLView, options)
        Sanic.test_mode = True
        app = Sanic(f"quotaql_test_{id(self):x}", configure_logging=False)
        app.config.MOTD = False
        app.add_route(view_class.as_view(schema=load(self.schema), **options), GRAPHQL_PATH)
        try:
            server = await app.create_server(sock=sock, access_log=False)
            if server is None:  # pragma: no cover - only without return_asyncio_server
                raise self._startup_failed("create_server returned no server")
            await server.startup()
            await server.after_start()
            await server.start_serving()
            self._ready.set()
            await stopping.wait()
            await server.before_stop()
            for connection in list(server.connections):
                connection.close_if_idle()
            closing = server.close()
            if closing is not None:
                await asyncio.wait_for(closing, STOP_TIMEOUT)
            await server.after_stop()
        finally:
            Sanic.unregister_app(app)


class QuartServer(_AsyncioServer):
    """``strawberry.quart.views.GraphQLView`` under Hypercorn (Quart's server), HTTP and WebSocket."""

    integration = "quart"
    websockets = True

    async def _serve(self, sock: socket.socket, stopping: asyncio.Event) -> None:
        from hypercorn.asyncio import serve as hypercorn_serve
        from hypercorn.config import Config
        from quart import Quart
        from strawberry.quart.views import GraphQLView

        options = dict(self.options)
        view_class = _view(GraphQLView, options)
        app = Quart(f"quotaql_test_{id(self):x}")
        view = view_class.as_view("graphql_view", schema=load(self.schema), **options)
        app.add_url_rule(GRAPHQL_PATH, view_func=view, methods=["GET", "POST"])
        app.add_websocket(GRAPHQL_PATH, view_func=view)

        config = Config()
        # Hypercorn adopts (and later closes) the descriptor: give it a copy of ours.
        config.bind = [f"fd://{os.dup(sock.fileno())}"]
        config.accesslog = None
        config.errorlog = logging.getLogger("hypercorn.error")
        config.graceful_timeout = 2
        serving = asyncio.ensure_future(
            hypercorn_serve(app, config, shutdown_trigger=stopping.wait)  # type: ignore[arg-type]
        )
        try:
            # Hypercorn has no "started" hook once its sockets accept: ask it over HTTP.
            while not serving.done() and not stopping.is_set():
                if await asyncio.to_thread(answers_http, self.port, GRAPHQL_PATH):
                    self._ready.set()
                    break
                await asyncio.sleep(0.02)
        finally:
            await serving


# -- Channels: daphne in a subprocess --------------------------------------------------------


class ChannelsServer(LiveServer):
    """Channels' ``GraphQLHTTPConsumer`` (and ``GraphQLWSConsumer``) under daphne, in a subprocess.

    Twisted's reactor cannot be restarted within one process, so daphne runs in a child
    process (``python -m daphne --fd N tests.support.channels_app:application``) on a
    socket bound here and handed over by descriptor. The child imports what it serves, so
    here, and only here:

    - ``schema`` must be an import path, ``"package.module:attribute"``;
    - ``context_getter``, when given, is an import path to ``(request, response) -> context``;
    - the other options must be JSON-serialisable (they reach the consumers through the
      ``QUOTAQL_CHANNELS_OPTIONS`` environment variable);
    - ``child_env`` adds variables to the child's environment (what its schema module reads
      at import).

    Daphne trusts no proxy header unless started with ``--proxy-headers`` (it is not).
    """

    integration = "channels"
    websockets = True

    def __init__(
        self,
        schema: strawberry.Schema | str,
        *,
        child_env: Mapping[str, str] | None = None,
        **options: Any,
    ) -> None:
        if not isinstance(schema, str):
            msg = (
                "the channels server runs daphne in a subprocess: pass the schema as an "
                "import path ('package.module:attribute'), not a Schema object"
            )
            raise TypeError(msg)
        getter = options.get("context_getter")
        if getter is not None and not isinstance(getter, str):
            msg = "the channels server takes context_getter as an import path"
            raise TypeError(msg)
        super().__init__(schema, **options)
        self.child_env = dict(child_env or {})
        self._process: subprocess.Popen[bytes] | None = None
        self._log_file: Any = None

    def log(self) -> str:
        """The child's stdout and stderr (daphne's log), last lines."""
        if self._log_file is None:
            return super().log()
        self._log_file.flush()
        self._log_file.seek(0)
        text = self._log_file.read().decode(errors="replace")
        return "\n".join(text.splitlines()[-60:])

    def _start(self, deadline: float) -> None:
        options = dict(self.options)
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                filter(None, [str(_REPO_ROOT), os.environ.get("PYTHONPATH")])
            ),
            "QUOTAQL_CHANNELS_SCHEMA": self.schema,
            "QUOTAQL_CHANNELS_CONTEXT_GETTER": options.pop("context_getter", None) or "",
            "QUOTAQL_CHANNELS_OPTIONS": json.dumps(options),
            "PYTHONUNBUFFERED": "1",
            **self.child_env,
        }
        sock = bind_loopback()
        self.port = sock.getsockname()[1]
        self._log_file = tempfile.TemporaryFile()  # noqa: SIM115 - closed in _stop
        command = [
            sys.executable,
            "-m",
            "daphne",
            "--fd",
            str(sock.fileno()),
            "-v",
            "1",
            "--access-log",
            os.devnull,
            "tests.support.channels_app:application",
        ]
        try:
            self._process = spawn(
                command,
                cwd=_REPO_ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=self._log_file,
                stderr=subprocess.STDOUT,
                pass_fds=[sock.fileno()],
            )
        finally:
            sock.close()  # the child holds the listening socket now
        while not answers_http(self.port, GRAPHQL_PATH, timeout=0.2):
            if self._process.poll() is not None:
                msg = f"exited with code {self._process.returncode} before it was ready"
                raise self._startup_failed(msg)
            if time.monotonic() > deadline:
                raise self._startup_failed(f"was not ready after {STARTUP_TIMEOUT:g} s")
            time.sleep(0.05)

    def _stop(self) -> None:
        if self._process is not None:
            terminate(self._process)
            self._process = None
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None


SERVERS: dict[str, type[LiveServer]] = {
    server.integration: server
    for server in (
        AsgiServer,
        FastAPIServer,
        DjangoServer,
        DjangoAsyncServer,
        FlaskServer,
        AiohttpServer,
        LitestarServer,
        SanicServer,
        QuartServer,
        ChannelsServer,
        ChaliceServer,
    )
}


def serve(integration: str, schema: strawberry.Schema | str, **options: Any) -> LiveServer:
    """An (unstarted) server for ``integration``; ``with serve(...) as server:`` runs it."""
    return SERVERS[integration](schema, **options)
