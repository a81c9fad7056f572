"""A real WSGI server for the Ariadne tests (werkzeug, in a thread); ASGI runs on
``tests.support.app_servers.UvicornServer``."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Self

from werkzeug.serving import WSGIRequestHandler, make_server

if TYPE_CHECKING:
    from types import TracebackType

STOP_TIMEOUT = 10.0


class _QuietHandler(WSGIRequestHandler):
    def log_request(self, *args: Any, **kwargs: Any) -> None:
        pass


class WSGIServer:
    """``with WSGIServer(app) as server: httpx.post(server.url + "/graphql", ...)``.

    werkzeug's threaded server: one thread per request, so concurrent clients run the
    sync path (``graphql_sync``, ``Gate.admit``) at the same time.
    """

    def __init__(self, app: Any) -> None:
        self._server = make_server(
            "127.0.0.1", 0, app, threaded=True, request_handler=_QuietHandler
        )
        self.port: int = self._server.server_port
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(STOP_TIMEOUT)
        if self._thread.is_alive():
            raise RuntimeError("the WSGI server did not stop")
