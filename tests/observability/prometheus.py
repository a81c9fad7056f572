"""A private ``prometheus`` server (the Debian package's binary) on a free loopback port."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import httpx

from tests.support.servers import free_port

if TYPE_CHECKING:
    from types import TracebackType

STARTUP_TIMEOUT = 30.0


class PrometheusServer:
    """``with PrometheusServer(config_yaml, files) as prometheus: prometheus.query("up")``.

    ``files`` are written beside the configuration (rule files). The server keeps its data
    in a temporary directory, removed when it stops; it is stopped by its PID.
    """

    def __init__(self, config: str, files: dict[str, str] | None = None) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            raise RuntimeError("prometheus not found: scripts/ensure-system-deps.sh installs it")
        self.directory = Path(tempfile.mkdtemp(prefix="quotaql-prometheus-"))
        (self.directory / "prometheus.yml").write_text(config, encoding="utf-8")
        for name, text in (files or {}).items():
            (self.directory / name).write_text(text, encoding="utf-8")
        self.port = free_port()
        self._command = [
            binary,
            f"--config.file={self.directory / 'prometheus.yml'}",
            f"--storage.tsdb.path={self.directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--log.level=warn",
        ]
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Self:
        with (self.directory / "prometheus.log").open("wb") as log:  # the child keeps its copy
            self._process = subprocess.Popen(self._command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while True:
            if self._process.poll() is not None:
                output = (self.directory / "prometheus.log").read_text(errors="replace")
                self.__exit__(None, None, None)
                raise RuntimeError(f"prometheus exited at start:\n{output}")
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.__exit__(None, None, None)
                raise RuntimeError("prometheus did not become ready")
            time.sleep(0.1)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(10)
        shutil.rmtree(self.directory, ignore_errors=True)

    def api(self, path: str, **params: str) -> Any:
        response = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=10)
        body = response.json()
        if body.get("status") != "success":
            raise AssertionError(f"{path} {params}: {body}")
        return body["data"]

    def query(self, expr: str) -> list[Any]:
        result: list[Any] = self.api("query", query=expr)["result"]
        return result
