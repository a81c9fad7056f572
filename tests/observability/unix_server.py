"""A real uvicorn server on a TCP port and a Unix socket at once, in one event loop.

Over the Unix socket the server reports no client address at all: that is what a proxy in
front of a Unix-socket server (nginx to ``gunicorn --bind unix:``) looks like to the app. The
ASGI scope's ``client`` is None, so a request without an API key or a principal has no
subject but ``anonymous`` (docs/identity.md#no-client-address). Both sockets are served by
the same loop, so an async storage client (``AsyncRedisStorage``) is only ever used from it.
"""

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


class TcpAndUnixServer:
    """``with TcpAndUnixServer(app) as server: httpx.get(server.url)``; and
    ``server.unix_client()`` talks to the same app over the Unix socket.

    The sockets are bound before the server starts (no port race). The Unix socket lives in
    a fresh short directory under the system's temporary one (its path must stay under ~100
    bytes), removed when the server stops.
    """

    def __init__(self, app: Any) -> None:
        self._tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._tcp.bind(("127.0.0.1", 0))
        self.port: int = self._tcp.getsockname()[1]
        self._directory = Path(tempfile.mkdtemp(prefix="quotaql-uds-"))
        self.path = self._directory / "app.sock"
        self._unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._unix.bind(str(self.path))
        # The asyncio loop, as tests/plugin/asgi.py's server: no dependence on uvloop.
        config = uvicorn.Config(
            app, log_level="warning", lifespan="off", access_log=False, loop="asyncio"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._tcp, self._unix]}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def unix_client(self, **kwargs: Any) -> httpx.Client:
        """An HTTP client that talks to the server over its Unix socket."""
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
        self._tcp.close()
        self._unix.close()
        shutil.rmtree(self._directory, ignore_errors=True)
        if self._thread.is_alive():
            raise RuntimeError("uvicorn did not stop")
