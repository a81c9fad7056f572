"""The suite's server processes, each private, on a free loopback port, stopped by its PID.

- :class:`RedisServer`: a ``redis-server``; :class:`RedisCluster`: a 3-master Redis Cluster
  of them, with replicas if asked, whose masters a test can kill (failover) and whose slots it
  can move (``cluster_topology.py``); :class:`AsyncRunner` drives their async clients from a
  sync test;
- :class:`PrometheusServer`: a ``prometheus`` (the Debian package's binary);
- :func:`spawn` and :func:`terminate` for any other child (daphne, uvicorn workers).

No server binds 6379, where the machine's own Redis may listen (:func:`free_port`,
:func:`bind_loopback`). A process is stopped with SIGTERM, then SIGKILL after a bounded wait;
what a crashed or interrupted test left running is reaped when the interpreter exits. Servers
in threads of this process (uvicorn, WSGI) are in ``app_servers.py``; those of each Strawberry
HTTP integration in ``frameworks.py``.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import http.client
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, Self, TypeVar

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.support.cluster_topology import ClusterTopology

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence
    from types import TracebackType

__all__ = [
    "HOST",
    "SYSTEM_REDIS_PORT",
    "AsyncRunner",
    "MissingRedisBinary",
    "PrometheusServer",
    "RedisCluster",
    "RedisServer",
    "RedisStartupError",
    "answers_http",
    "bind_loopback",
    "free_cluster_port",
    "free_port",
    "live_servers",
    "reap_all",
    "require_binary",
    "spawn",
    "terminate",
]

HOST = "127.0.0.1"
# The machine's own Redis may listen here; no helper ever starts on, or talks to, this port.
SYSTEM_REDIS_PORT = 6379
CLUSTER_BUS_OFFSET = 10_000
CLUSTER_SLOTS = 16_384
STARTUP_TIMEOUT = 10.0
STOP_TIMEOUT = 10.0
_PORT_ATTEMPTS = 5


class MissingRedisBinary(RuntimeError):
    """``redis-server`` or ``redis-cli`` is not installed: the Redis tests cannot run."""


class RedisStartupError(RuntimeError):
    """A ``redis-server`` did not come up; the message carries the tail of its log.

    Attributes:
        port_in_use: The server died because its port (or cluster bus port) was taken, so
            retrying on another port may succeed.
    """

    def __init__(self, message: str, *, port_in_use: bool = False) -> None:
        super().__init__(message)
        self.port_in_use = port_in_use


def require_binary(name: str) -> str:
    """Return the path of ``name`` on PATH, or raise naming the Debian package that has it."""
    path = shutil.which(name)
    if path is None:
        # Debian ships redis-cli in redis-tools, redis-server in redis-server.
        package = "redis-tools" if "cli" in Path(name).name else "redis-server"
        msg = (
            f"{name!r} not found on PATH; the Redis tests need a real server "
            f"(Debian/Ubuntu: apt-get install {package})"
        )
        raise MissingRedisBinary(msg)
    return path


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A loopback TCP port that is free right now (the kernel's choice, never 6379)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((HOST, 0))
            port: int = sock.getsockname()[1]
        if port != SYSTEM_REDIS_PORT:
            return port


def free_cluster_port(exclude: Sequence[int] = ()) -> int:
    """A free port whose cluster bus port (``port + 10000``) is free too.

    Args:
        exclude: Ports already handed to other nodes; the result and its bus port avoid them
            and their bus ports.
    """
    taken = set(exclude) | {p + CLUSTER_BUS_OFFSET for p in exclude}
    for _ in range(200):
        port = free_port()
        bus = port + CLUSTER_BUS_OFFSET
        if bus <= 65_535 and not {port, bus} & taken and _port_is_free(bus):
            return port
    msg = "no loopback port with a free cluster bus port (port + 10000) after 200 tries"
    raise RuntimeError(msg)


def bind_loopback() -> socket.socket:
    """A listening TCP socket on 127.0.0.1, port chosen by the kernel and never 6379.

    A server handed the socket itself (uvicorn, werkzeug, a child process through
    ``pass_fds``) has no port to race for. The socket is inheritable.
    """
    while True:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((HOST, 0))
        if sock.getsockname()[1] != SYSTEM_REDIS_PORT:
            sock.listen(128)
            sock.set_inheritable(True)
            return sock
        sock.close()  # pragma: no cover - one chance in ~28,000


def answers_http(port: int, path: str = "/", timeout: float = 0.5) -> bool:
    """Whether something answers an HTTP GET of ``path`` on ``127.0.0.1:port`` (any status)."""
    connection = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        connection.request("GET", path, headers={"Accept": "application/json"})
        connection.getresponse().read()
    except OSError:
        return False
    else:
        return True
    finally:
        connection.close()


# -- processes --------------------------------------------------------------------------------

# Every child started by spawn() and not yet reaped, stopped at exit if a test left it running.
_CHILDREN: set[subprocess.Popen[bytes]] = set()
_CHILDREN_LOCK = threading.Lock()


def spawn(args: Sequence[str], **popen: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(args, **popen)``, reaped at exit if no :func:`terminate` came first."""
    process: subprocess.Popen[bytes] = subprocess.Popen(args, **popen)
    with _CHILDREN_LOCK:
        _CHILDREN.add(process)
    return process


def _ask_to_stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, and SIGCONT: a paused (SIGSTOPped) process handles SIGTERM once continued."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
            process.send_signal(signal.SIGCONT)


def terminate(process: subprocess.Popen[bytes], timeout: float = STOP_TIMEOUT) -> None:
    """Stop ``process`` by its PID: SIGTERM, then SIGKILL if it still runs after ``timeout`` s.

    The process is reaped either way; a paused one is continued so that it can exit.
    """
    _ask_to_stop(process)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        process.wait(timeout)
    with _CHILDREN_LOCK:
        _CHILDREN.discard(process)


def _reap_children() -> None:
    with _CHILDREN_LOCK:
        children = list(_CHILDREN)
    for process in children:
        terminate(process)


atexit.register(_reap_children)


# Every server started and not yet reaped, so that atexit (and the session guard in
# conftest.py) can stop what a crashed or interrupted test left behind.
_LIVE: set[RedisServer] = set()
_LIVE_LOCK = threading.Lock()


def live_servers() -> list[RedisServer]:
    """Servers started by this process whose processes have not been reaped yet."""
    with _LIVE_LOCK:
        return list(_LIVE)


def reap_all() -> list[int]:
    """SIGKILL and reap every live server of this process; return their PIDs."""
    pids = []
    for server in live_servers():
        if server.pid is not None:
            pids.append(server.pid)
        server.kill()
    return pids


atexit.register(reap_all)


class RedisServer:
    """One private ``redis-server`` on a free loopback port that keeps nothing on disk.

    The constructor does not start anything; :meth:`start` (or ``with``) does.

    Example::

        with RedisServer() as server:
            with server.client() as client:
                assert client.ping()
    """

    def __init__(
        self,
        extra_args: Sequence[str] = (),
        *,
        port: int | None = None,
        directory: Path | None = None,
        executable: str = "redis-server",
        startup_timeout: float = STARTUP_TIMEOUT,
    ) -> None:
        """Describe a server; nothing runs until :meth:`start`.

        Args:
            extra_args: More ``redis-server`` command-line options, e.g. ``["--maxmemory", "1mb"]``.
            port: A fixed port. By default a free one is chosen, and chosen again if another
                process takes it before the server binds.
            directory: The server's ``--dir``, owned by the caller. By default a private temp
                dir is made at start and removed when the process is reaped.
            executable: The server binary.
            startup_timeout: Seconds to wait for ``PING`` before giving up.
        """
        if port == SYSTEM_REDIS_PORT:
            msg = f"port {SYSTEM_REDIS_PORT} belongs to the machine's Redis; tests never use it"
            raise ValueError(msg)
        self.host = HOST
        self._fixed_port = port is not None
        self._port = port
        self._extra_args = tuple(extra_args)
        self._given_directory = directory
        self._directory: Path | None = None
        self._executable = executable
        self._startup_timeout = startup_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self._log_path: Path | None = None
        self._paused = False
        self._resume_timer: threading.Timer | None = None
        self._lock = threading.RLock()

    # -- addresses and state ------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The TCP port; fixed for the server's lifetime, restarts included."""
        if self._port is None:
            msg = "the server has not been started; its port is chosen at start()"
            raise RuntimeError(msg)
        return self._port

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT/0``."""
        return f"redis://{self.host}:{self.port}/0"

    @property
    def pid(self) -> int | None:
        """PID of the current (or last) process, ``None`` before the first start."""
        return None if self._process is None else self._process.pid

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        """The current (or last) ``Popen``; its ``returncode`` is set once reaped."""
        return self._process

    @property
    def running(self) -> bool:
        """The process exists and has not exited (a paused server is running)."""
        return self._process is not None and self._process.poll() is None

    @property
    def paused(self) -> bool:
        """The process is stopped with SIGSTOP."""
        return self._paused

    @property
    def directory(self) -> Path | None:
        """The server's ``--dir`` while it runs."""
        return self._directory

    def log_tail(self, lines: int = 20) -> str:
        """The last ``lines`` lines of the server's log (stdout and stderr)."""
        if self._log_path is None or not self._log_path.exists():
            return "<no log>"
        text = self._log_path.read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> Self:
        """Start the process and wait until it answers ``PING`` (bounded).

        Raises:
            MissingRedisBinary: ``redis-server`` is not installed.
            RedisStartupError: The server exited or did not answer in time.
        """
        with self._lock:
            if self.running:
                msg = f"redis-server already running on port {self.port} (pid {self.pid})"
                raise RuntimeError(msg)
            executable = require_binary(self._executable)
            attempt = 1
            while True:
                if self._port is None or (attempt > 1 and not self._fixed_port):
                    self._port = free_port()
                try:
                    self._spawn_and_wait(executable)
                except RedisStartupError as exc:
                    # Another process took the port between free_port() and the bind.
                    if exc.port_in_use and not self._fixed_port and attempt < _PORT_ATTEMPTS:
                        attempt += 1
                        continue
                    raise
                return self

    def _spawn_and_wait(self, executable: str) -> None:
        if self._given_directory is not None:
            self._directory = self._given_directory
        else:
            self._directory = Path(tempfile.mkdtemp(prefix=f"quotaql-redis-{self.port}-"))
        self._log_path = self._directory / f"redis-{self.port}.log"
        args = [
            executable,
            "--port", str(self.port),
            "--bind", self.host,
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self._directory),
            "--daemonize", "no",
            "--logfile", "",
            # DEBUG SLEEP / DEBUG OBJECT are handy for tests; the server is loopback-only.
            "--enable-debug-command", "local",
            *self._extra_args,
        ]  # fmt: skip
        with self._log_path.open("ab") as log:
            # A new session: Ctrl-C in the terminal reaches pytest, whose finalizers stop the
            # server in order, instead of killing it under a test mid-flight.
            self._process = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        with _LIVE_LOCK:
            _LIVE.add(self)
        try:
            self._wait_ready()
        except BaseException:
            # The error message already carries the log tail.
            self.kill()
            raise

    def _wait_ready(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + self._startup_timeout
        # No redis-py retries: its backoff would sleep through a server that already died.
        with redis.Redis(
            self.host,
            self.port,
            socket_timeout=0.5,
            socket_connect_timeout=0.5,
            retry=Retry(NoBackoff(), 0),
        ) as probe:
            while True:
                if self._process.poll() is not None:
                    tail = self.log_tail()
                    msg = (
                        f"redis-server on port {self.port} exited with code "
                        f"{self._process.returncode} during startup:\n{tail}"
                    )
                    raise RedisStartupError(msg, port_in_use="in use" in tail)
                try:
                    # Check the PID too: if another process owns the port, PING would succeed
                    # against *its* server while ours dies on bind.
                    if probe.ping() and probe.info("server")["process_id"] == self._process.pid:
                        return
                except redis.exceptions.RedisError:
                    pass
                if time.monotonic() > deadline:
                    msg = (
                        f"redis-server on port {self.port} did not answer PING within "
                        f"{self._startup_timeout:g} s:\n{self.log_tail()}"
                    )
                    raise RedisStartupError(msg)
                time.sleep(0.01)

    def kill(self) -> None:
        """SIGKILL the server (a crash: no shutdown), reap it, and remove its temp dir."""
        with self._lock:
            self._cancel_resume_timer()
            if self._process is not None and self._process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    self._process.kill()
                self._process.wait(timeout=STOP_TIMEOUT)
            self._paused = False
            with _LIVE_LOCK:
                _LIVE.discard(self)
            self._remove_directory()

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM the server, reap it (SIGKILL after ``timeout`` s), remove its temp dir."""
        with self._lock:
            process = self._process
            if process is not None:
                _ask_to_stop(process)
                # A server that ignores SIGTERM for ``timeout`` s gets the SIGKILL below.
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=timeout)
            self.kill()

    def restart(self) -> Self:
        """Stop the server and start a new, empty one on the same port; wait until ready.

        Data and loaded scripts are gone afterwards (clients must reload with NOSCRIPT).
        """
        with self._lock:
            port = self.port
            self.stop()
            fixed = self._fixed_port
            self._port, self._fixed_port = port, True
            try:
                return self.start()
            finally:
                self._fixed_port = fixed

    def pause(self, seconds: float | None = None) -> None:
        """SIGSTOP the server: connections are accepted but never answered (timeouts).

        Args:
            seconds: Resume automatically after this long (from a timer thread).
        """
        with self._lock:
            if self._process is None or not self.running:
                msg = "cannot pause a redis-server that is not running"
                raise RuntimeError(msg)
            self._cancel_resume_timer()
            self._process.send_signal(signal.SIGSTOP)
            self._paused = True
            if seconds is not None:
                self._resume_timer = threading.Timer(seconds, self.resume)
                self._resume_timer.daemon = True
                self._resume_timer.start()

    def resume(self) -> None:
        """SIGCONT a paused server."""
        with self._lock:
            self._cancel_resume_timer()
            if self._process is not None and self.running:
                self._process.send_signal(signal.SIGCONT)
            self._paused = False

    def _cancel_resume_timer(self) -> None:
        timer, self._resume_timer = self._resume_timer, None
        if timer is not None and timer is not threading.current_thread():
            timer.cancel()

    def _remove_directory(self) -> None:
        if self._directory is not None and self._given_directory is None:
            shutil.rmtree(self._directory, ignore_errors=True)
        self._directory = None

    # -- clients ------------------------------------------------------------------------------

    def client(self, **kwargs: Any) -> redis.Redis:
        """A new ``redis.Redis`` (bytes replies unless overridden); close it when done."""
        kwargs.setdefault("decode_responses", False)
        return redis.Redis(host=self.host, port=self.port, **kwargs)

    def async_client(self, **kwargs: Any) -> redis.asyncio.Redis:
        """A new ``redis.asyncio.Redis``; create, use and ``aclose()`` it in one event loop."""
        kwargs.setdefault("decode_responses", False)
        return redis.asyncio.Redis(host=self.host, port=self.port, **kwargs)

    def info(self, section: str | None = None) -> dict[str, object]:
        """``INFO`` (optionally one section) as a dict."""
        with self.client(socket_timeout=5) as client:
            result: dict[str, object] = client.info(section)
            return result

    def __enter__(self) -> Self:
        if not self.running:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "paused" if self._paused else "running" if self.running else "stopped"
        return f"<RedisServer {self.host}:{self._port} pid={self.pid} {state}>"


class RedisCluster(ClusterTopology):
    """A Redis Cluster of private masters, each with ``replicas`` replicas, on free loopback
    ports; its topology (slots, failover, migration) in :class:`ClusterTopology`.

    Example::

        with RedisCluster() as cluster:
            with cluster.client() as client:
                client.set("{acme}:tokens", 5)
    """

    def __init__(
        self,
        masters: int = 3,
        *,
        replicas: int = 0,
        node_timeout_ms: int = 2000,
        executable: str = "redis-server",
        cli: str = "redis-cli",
        startup_timeout: float = STARTUP_TIMEOUT,
    ) -> None:
        """Describe a cluster; nothing runs until :meth:`start`.

        Args:
            masters: Number of master nodes (``redis-cli --cluster create`` needs at least 3).
            replicas: Replicas per master (``--cluster-replicas``), linked before start returns.
            node_timeout_ms: ``--cluster-node-timeout``.
            executable: The server binary.
            cli: The ``redis-cli`` binary used for ``--cluster create``.
            startup_timeout: Seconds to wait for each node and for ``cluster_state:ok``.
        """
        self.host = HOST
        self._masters = masters
        self._replicas = replicas
        self._node_timeout_ms = node_timeout_ms
        self._executable = executable
        self._cli = cli
        self._startup_timeout = startup_timeout
        self._directory: Path | None = None
        self.nodes: list[RedisServer] = []

    @property
    def ports(self) -> list[int]:
        """The client ports of the nodes, in start order."""
        return [node.port for node in self.nodes]

    @property
    def pids(self) -> list[int]:
        """The PIDs of the node processes."""
        return [node.pid for node in self.nodes if node.pid is not None]

    @property
    def startup_nodes(self) -> list[redis.cluster.ClusterNode]:
        """Every node, for ``redis.cluster.RedisCluster(startup_nodes=...)``."""
        return [redis.cluster.ClusterNode(self.host, port) for port in self.ports]

    @property
    def url(self) -> str:
        """``redis://`` URL of the first node (enough for ``RedisCluster.from_url``)."""
        return self.nodes[0].url

    @property
    def directory(self) -> Path | None:
        """The temp dir holding every node's ``nodes-PORT.conf`` and log."""
        return self._directory

    def start(self) -> Self:
        """Start the nodes, join them with ``redis-cli --cluster create``, wait for ``ok``.

        On any failure every node already started is stopped before the error propagates.
        """
        if self.nodes:
            msg = "cluster already started"
            raise RuntimeError(msg)
        require_binary(self._executable)
        cli = require_binary(self._cli)
        self._directory = Path(tempfile.mkdtemp(prefix="quotaql-redis-cluster-"))
        try:
            for _ in range(self._masters * (1 + self._replicas)):
                self.nodes.append(self._start_node())
            addresses = [f"{self.host}:{port}" for port in self.ports]
            command = [cli, "--cluster", "create", *addresses]
            command += ["--cluster-replicas", str(self._replicas), "--cluster-yes"]
            result = subprocess.run(
                command,
                capture_output=True,
                text=True,
                timeout=self._startup_timeout * 3,
                check=False,
            )
            if result.returncode != 0:
                msg = f"redis-cli --cluster create failed ({result.returncode}):\n"
                msg += (result.stdout + result.stderr)[-2000:]
                raise RedisStartupError(msg)
            self._wait_state_ok()
            self.wait_replicas_linked()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_node(self) -> RedisServer:
        assert self._directory is not None
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            port = free_cluster_port(exclude=[node.port for node in self.nodes])
            node = RedisServer(
                [
                    "--cluster-enabled", "yes",
                    "--cluster-config-file", str(self._directory / f"nodes-{port}.conf"),
                    "--cluster-node-timeout", str(self._node_timeout_ms),
                    # A replica's first full sync starts at once, not after 5 s; CLUSTER SLOTS
                    # lists it once its offset moved, which the master's PINGs do.
                    "--repl-diskless-sync-delay", "0",
                    "--repl-ping-replica-period", "1",
                ],
                port=port,
                directory=self._directory,
                executable=self._executable,
                startup_timeout=self._startup_timeout,
            )  # fmt: skip
            try:
                return node.start()
            except RedisStartupError as exc:
                # The port or its bus port was taken between the check and the bind.
                if not exc.port_in_use or attempt == _PORT_ATTEMPTS:
                    raise
        raise AssertionError  # pragma: no cover - the loop returns or raises

    def _wait_state_ok(self) -> None:
        deadline = time.monotonic() + self._startup_timeout
        pending = list(self.nodes)
        while pending:
            node = pending[0]
            with node.client(socket_timeout=1) as client:
                info = client.execute_command("CLUSTER INFO")
            converged = (
                info.get("cluster_state") == "ok"
                and int(info.get("cluster_known_nodes", 0)) == len(self.nodes)
                and int(info.get("cluster_slots_ok", 0)) == CLUSTER_SLOTS
            )
            if converged:
                pending.pop(0)
                continue
            if time.monotonic() > deadline:
                msg = (
                    f"cluster node {node.port} not ok after {self._startup_timeout:g} s: "
                    f"{info}\n{node.log_tail()}"
                )
                raise RedisStartupError(msg)
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop every node by PID (SIGTERM, bounded, then SIGKILL) and remove the temp dir."""
        # Signal every node first so they shut down in parallel, then reap each.
        for node in self.nodes:
            if node.process is not None:
                _ask_to_stop(node.process)
        for node in self.nodes:
            node.stop()
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
            self._directory = None

    # -- clients ------------------------------------------------------------------------------

    def client(self, **kwargs: Any) -> redis.cluster.RedisCluster:
        """A new ``redis.cluster.RedisCluster`` on all nodes; close it when done."""
        kwargs.setdefault("decode_responses", False)
        return redis.cluster.RedisCluster(startup_nodes=self.startup_nodes, **kwargs)

    def async_client(self, **kwargs: Any) -> redis.asyncio.cluster.RedisCluster:
        """A new ``redis.asyncio.cluster.RedisCluster``; use and ``aclose()`` it in one loop."""
        kwargs.setdefault("decode_responses", False)
        nodes = [redis.asyncio.cluster.ClusterNode(self.host, port) for port in self.ports]
        return redis.asyncio.cluster.RedisCluster(startup_nodes=nodes, **kwargs)

    def __enter__(self) -> Self:
        if not self.nodes:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<RedisCluster ports={self.ports} pids={self.pids}>"


class _AsyncClient(Protocol):
    async def aclose(self) -> None: ...


ClientT = TypeVar("ClientT", bound=_AsyncClient)
T = TypeVar("T")


class AsyncRunner(Generic[ClientT]):
    """Runs ``async def body(client)`` in a fresh event loop with a fresh async client.

    redis.asyncio connections belong to the loop that opened them, so the client is made
    inside the loop and closed (``await client.aclose()``) before the loop ends. Without
    pytest-asyncio this is how a sync test drives async code.

    Example::

        runner = AsyncRunner(server.async_client)

        async def body(client: redis.asyncio.Redis) -> bytes | None:
            await client.set("k", "v")
            return await client.get("k")

        assert runner(body) == b"v"
    """

    def __init__(self, factory: Callable[..., ClientT]) -> None:
        """Wrap a client factory such as :meth:`RedisServer.async_client`."""
        self.factory = factory

    def __call__(self, body: Callable[[ClientT], Awaitable[T]], **client_kwargs: Any) -> T:
        """Run ``body`` with a new client (``client_kwargs`` go to the factory); return its result."""

        async def main() -> T:
            client = self.factory(**client_kwargs)
            try:
                return await body(client)
            finally:
                await client.aclose()

        return asyncio.run(main())


# -- Prometheus -------------------------------------------------------------------------------

PROMETHEUS_STARTUP_TIMEOUT = 30.0


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
            f"--web.listen-address={HOST}:{self.port}",
            "--log.level=warn",
        ]
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def __enter__(self) -> Self:
        import httpx

        with (self.directory / "prometheus.log").open("wb") as log:  # the child keeps its copy
            self._process = spawn(self._command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + PROMETHEUS_STARTUP_TIMEOUT
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
        if self._process is not None:
            terminate(self._process)
        shutil.rmtree(self.directory, ignore_errors=True)

    def api(self, path: str, **params: str) -> Any:
        import httpx

        response = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=10)
        body = response.json()
        if body.get("status") != "success":
            raise AssertionError(f"{path} {params}: {body}")
        return body["data"]

    def query(self, expr: str) -> list[Any]:
        result: list[Any] = self.api("query", query=expr)["result"]
        return result

    def holds(self, expr: str, value: float) -> bool:
        """``expr``'s first series is at ``value`` now (what a test waits for a scrape to
        show)."""
        found = self.query(expr)
        return bool(found) and float(found[0]["value"][1]) == value


def scrape_config(job: str, *targets: str, metrics_path: str = "/metrics") -> str:
    """A ``prometheus.yml`` that scrapes ``targets`` (``host:port``) as ``job`` every second."""
    listed = ", ".join(f'"{target}"' for target in targets)
    return (
        "global:\n  scrape_interval: 1s\nscrape_configs:\n"
        f"  - job_name: {job}\n    metrics_path: {metrics_path}\n"
        f"    static_configs:\n      - targets: [{listed}]\n"
    )
