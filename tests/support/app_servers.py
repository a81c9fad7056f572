"""Servers in threads of this process: an ASGI app under uvicorn, a WSGI app under werkzeug.

Each binds its socket before it starts (:func:`tests.support.servers.bind_loopback`: no port
race, never 6379), is ready when ``with`` hands it over, and on exit is told to stop and its
thread joined, within a bound.
"""

from __future__ import annotations

import abc
import logging
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from tests.support.servers import HOST, STARTUP_TIMEOUT, STOP_TIMEOUT, bind_loopback

if TYPE_CHECKING:
    import socketserver
    from collections.abc import Callable
    from types import TracebackType

    import httpx

__all__ = [
    "UVICORN_DEFAULTS",
    "ServerThread",
    "ServingThread",
    "UvicornServer",
    "WSGIServer",
    "wait_started",
]

_log = logging.getLogger(__name__)


# -- threads ----------------------------------------------------------------------------------


class ServingThread(threading.Thread):
    """A daemon thread that runs one server's loop; what the loop raised is kept in ``error``
    and logged (a server's log shows it), then raised on to ``threading.excepthook``, where
    pytest turns it into an error of the test, unless ``swallow``."""

    def __init__(self, target: Callable[[], object], name: str, *, swallow: bool = False) -> None:
        super().__init__(name=name, daemon=True)
        self._serve = target
        self._swallow = swallow
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._serve()
        except BaseException as exc:
            self.error = exc
            _log.exception("%s failed", self.name)
            if not self._swallow:
                raise

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Join the thread (its server was told to stop); raise if it still runs after
        ``timeout`` s."""
        self.join(timeout)
        if self.is_alive():
            msg = f"{self.name} did not stop in {timeout:g} s"
            raise RuntimeError(msg)


def wait_started(
    started: Callable[[], bool], thread: ServingThread, timeout: float, what: str
) -> None:
    """Wait until ``started()``; raise if ``thread`` ended first or ``timeout`` s passed."""
    deadline = time.monotonic() + timeout
    while not started():
        if not thread.is_alive():
            msg = f"{what} stopped before it was ready"
            raise RuntimeError(msg)
        if time.monotonic() > deadline:
            msg = f"{what} was not ready after {timeout:g} s"
            raise RuntimeError(msg)
        time.sleep(0.01)


# -- uvicorn and WSGI servers in threads ------------------------------------------------------


class _Served(abc.ABC):
    """A server on ``127.0.0.1:port``: ``with`` starts it, and stops it on the way out."""

    port: int

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @abc.abstractmethod
    def start(self) -> Self:
        """Start serving; return once requests are accepted."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Stop serving and join the thread (bounded)."""

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


# The asyncio loop, not uvloop (which the frameworks in the dev group bring): the tests never
# depend on which loop happens to be installed. No proxy headers: uvicorn trusts
# X-Forwarded-For from 127.0.0.1 by default, which every test client is, and quotaql's own
# trusted_proxies are what the tests are about: the socket peer is the client.
UVICORN_DEFAULTS: dict[str, Any] = {
    "log_level": "warning",
    "lifespan": "off",
    "access_log": False,
    "loop": "asyncio",
    "proxy_headers": False,
}


class UvicornServer(_Served):
    """``with UvicornServer(app) as server: httpx.get(server.url + "/graphql")``.

    uvicorn runs in a thread of this process on a socket bound here before it starts (no port
    race); the port is known from the constructor on.

    Args:
        app: the ASGI app.
        unix_socket: serve a Unix socket too, in the same event loop (``unix_client()``):
            over it the server reports no client address at all, which is what a proxy in
            front of a Unix-socket server looks like to the app. The socket lives in a fresh
            short directory (its path must stay under ~100 bytes), removed on exit.
        startup_timeout: seconds to wait for uvicorn to accept requests.
        config: more ``uvicorn.Config`` options (``lifespan="on"``, ...), over
            ``UVICORN_DEFAULTS``.
    """

    def __init__(
        self,
        app: Any,
        *,
        unix_socket: bool = False,
        startup_timeout: float = STARTUP_TIMEOUT,
        **config: Any,
    ) -> None:
        import uvicorn

        tcp = bind_loopback()
        self.port: int = tcp.getsockname()[1]
        self._sockets = [tcp]
        self._directory: Path | None = None
        self.path: Path | None = None
        if unix_socket:
            self._directory = Path(tempfile.mkdtemp(prefix="quotaql-uds-"))
            self.path = self._directory / "app.sock"
            unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            unix.bind(str(self.path))
            self._sockets.append(unix)
        self._startup_timeout = startup_timeout
        self._server = uvicorn.Server(uvicorn.Config(app, **{**UVICORN_DEFAULTS, **config}))
        self._thread = ServingThread(
            lambda: self._server.run(sockets=self._sockets), f"uvicorn-{self.port}"
        )

    @property
    def ws_url(self) -> str:
        """The GraphQL endpoint over websockets."""
        return f"ws://{HOST}:{self.port}/graphql"

    def unix_client(self, **kwargs: Any) -> httpx.Client:
        """An HTTP client that talks to the server over its Unix socket."""
        import httpx

        if self.path is None:
            raise RuntimeError("this server has no Unix socket: UvicornServer(unix_socket=True)")
        transport = httpx.HTTPTransport(uds=str(self.path))
        return httpx.Client(transport=transport, base_url="http://quotaql.invalid", **kwargs)

    def start(self) -> Self:
        """Start serving; return once uvicorn accepts requests (stopped again if it does not)."""
        self._thread.start()
        try:
            wait_started(
                lambda: bool(self._server.started),
                self._thread,
                self._startup_timeout,
                f"uvicorn on port {self.port}",
            )
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Tell uvicorn to exit, join its thread, close the sockets, remove the Unix socket."""
        self._server.should_exit = True
        try:
            if self._thread.is_alive():
                self._thread.stop(STARTUP_TIMEOUT)
        finally:
            for sock in self._sockets:
                sock.close()
            if self._directory is not None:
                shutil.rmtree(self._directory, ignore_errors=True)


class ServerThread(_Served):
    """A ``socketserver`` server (werkzeug's, Django's, Chalice's local server), already
    listening, served from a thread: ``with`` starts it, and on exit it is shut down, joined
    and closed."""

    def __init__(self, server: socketserver.BaseServer) -> None:
        self.server = server
        self.port: int = server.server_address[1]  # type: ignore[index]
        self._thread = ServingThread(
            lambda: server.serve_forever(poll_interval=0.05), f"{type(server).__name__}-{self.port}"
        )

    def start(self) -> Self:
        self._thread.start()  # the socket listens since the server's constructor
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self.server.shutdown()  # returns once serve_forever has returned
        try:
            if self._thread.ident is not None:
                self._thread.stop()
        finally:
            self.server.server_close()


class WSGIServer(ServerThread):
    """``with WSGIServer(app) as server: httpx.post(server.url + "/graphql", ...)``.

    werkzeug's threaded server: one thread per request, so concurrent clients run a sync
    path (``graphql_sync``, ``Gate.admit``) at the same time. No access log.
    """

    def __init__(self, app: Any) -> None:
        from werkzeug.serving import WSGIRequestHandler, make_server

        class QuietHandler(WSGIRequestHandler):
            def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
                pass  # one access line per request on stderr is noise in tests

        sock = bind_loopback()
        try:
            # werkzeug adopts a listening socket through ``fd`` (it dups it).
            server = make_server(
                HOST, 0, app, threaded=True, request_handler=QuietHandler, fd=sock.fileno()
            )
        finally:
            sock.close()
        super().__init__(server)
