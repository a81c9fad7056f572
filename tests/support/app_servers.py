"""A real uvicorn server in a thread, on sockets bound before it starts (no port race)."""

from __future__ import annotations

import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import httpx
import uvicorn

if TYPE_CHECKING:
    from types import TracebackType

STARTUP_TIMEOUT = 10.0

# The asyncio loop, not uvloop (which the frameworks in the dev group bring): the tests never
# depend on which loop happens to be installed. No proxy headers: uvicorn trusts
# X-Forwarded-For from 127.0.0.1 by default, which every test client is, and quotaql's own
# trusted_proxies are what the tests are about: the socket peer is the client.
DEFAULTS: dict[str, Any] = {
    "log_level": "warning",
    "lifespan": "off",
    "access_log": False,
    "loop": "asyncio",
    "proxy_headers": False,
}


class UvicornServer:
    """``with UvicornServer(app) as server: httpx.get(server.url + "/graphql")``.

    Args:
        app: the ASGI app.
        unix_socket: serve a Unix socket too, in the same event loop (``unix_client()``):
            over it the server reports no client address at all, which is what a proxy in
            front of a Unix-socket server looks like to the app. The socket lives in a fresh
            short directory (its path must stay under ~100 bytes), removed on exit.
        config: more ``uvicorn.Config`` options (``lifespan="on"``, ...).
    """

    def __init__(self, app: Any, *, unix_socket: bool = False, **config: Any) -> None:
        tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        tcp.bind(("127.0.0.1", 0))
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
        self._server = uvicorn.Server(uvicorn.Config(app, **{**DEFAULTS, **config}))
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": self._sockets}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        """The GraphQL endpoint over websockets."""
        return f"ws://127.0.0.1:{self.port}/graphql"

    def unix_client(self, **kwargs: Any) -> httpx.Client:
        """An HTTP client that talks to the server over its Unix socket."""
        if self.path is None:
            raise RuntimeError("this server has no Unix socket: UvicornServer(unix_socket=True)")
        transport = httpx.HTTPTransport(uds=str(self.path))
        return httpx.Client(transport=transport, base_url="http://quotaql.invalid", **kwargs)

    def __enter__(self) -> Self:
        self._thread.start()
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.__exit__(None, None, None)
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._server.should_exit = True
        self._thread.join(STARTUP_TIMEOUT)
        for sock in self._sockets:
            sock.close()
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
        if self._thread.is_alive():
            raise RuntimeError("uvicorn did not stop")
