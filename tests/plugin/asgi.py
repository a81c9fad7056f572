"""A real uvicorn server in a thread, on a socket bound before it starts (no port race)."""

from __future__ import annotations

import socket
import threading
import time
from typing import TYPE_CHECKING, Any, Self

import uvicorn

if TYPE_CHECKING:
    from types import TracebackType

STARTUP_TIMEOUT = 10.0


class UvicornServer:
    """``with UvicornServer(app) as server: httpx.get(server.url + "/graphql")``."""

    def __init__(self, app: Any) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", 0))
        self.port: int = self._socket.getsockname()[1]
        # The asyncio loop, not uvloop (which the frameworks in the dev group bring): the
        # tests never depend on which loop happens to be installed.
        config = uvicorn.Config(
            app, log_level="warning", lifespan="off", access_log=False, loop="asyncio"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

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
        self._socket.close()
        if self._thread.is_alive():
            raise RuntimeError("uvicorn did not stop")
