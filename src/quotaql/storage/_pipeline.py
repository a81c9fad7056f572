"""Implicit pipelining: the script calls an event loop makes at once go out in one write.

Concurrent decisions of one process (many requests in flight on one event loop) each used to
make their own round trip through redis-py, one command per connection at a time. A
:class:`Pipeline` queues each call and flushes the queue at the end of the loop iteration
that queued it (``call_soon``): whatever the loop's tasks asked for meanwhile goes out as
one write on one of a few dedicated connections, and the replies are read back in order.
Under load, batches grow while a connection is busy (a call waits at most for the batch
ahead of it), so the latency of one call does not grow with the load; alone, a call pays
one loop iteration more than a direct call.

Envoy's ratelimit service does the same with its Redis client's pipeline window; asyncio
offers a window without a timer: the rest of the current iteration.

One deadline bounds each batch (connecting, writing, reading), with the storage's stall
tolerance (:class:`quotaql.storage.redis._Deadline`). A caller that stops waiting (its task
is cancelled) only cancels its own future: the reply is still read, and the connection stays
in step. A ``NOSCRIPT`` reply (a restart, a failover, ``SCRIPT FLUSH``) loads the script on
the connection and sends the command once more.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from quotaql.errors import StorageError, StorageNotReached, StorageTimeout

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = ["Pipeline", "PipelineSettings", "storage_error"]


@dataclass(slots=True, eq=False)
class _Command:
    script: Any
    keys: Sequence[str]
    args: Sequence[str]
    future: asyncio.Future[Any]
    retried: bool = False  # sent again after NOSCRIPT
    asking: bool = False  # sent after ``ASKING`` (a Redis Cluster's ASK redirection)
    redirects: int = 0  # MOVED / ASK redirections followed (a Redis Cluster's)
    tries: int = 0  # sent again after TRYAGAIN / CLUSTERDOWN (a Redis Cluster's)


@dataclass(frozen=True, slots=True)
class PipelineSettings:
    """How a storage's pipelines reach Redis: the same for the pipeline of each event loop.

    Attributes:
        make_connection: makes a new (not yet connected) redis-py asyncio connection.
        deadline: ``(loop, task) -> deadline`` for one batch (see ``_Deadline``).
        timeout: the storage's timeout, for the error messages.
        errors: the exceptions of redis-py that mean Redis failed.
        noscript: redis-py's ``NoScriptError``.
        limit: most commands per write.
        connections: most connections, each carrying one batch at a time.
        queue_max: most commands waiting; beyond it a call fails at once (a
            :class:`StorageError`, so the limiter's fail mode answers).
    """

    make_connection: Callable[[], Any]
    deadline: Callable[[asyncio.AbstractEventLoop, asyncio.Task[Any]], Any]
    timeout: float
    errors: tuple[type[BaseException], ...]
    noscript: type[BaseException]
    limit: int = 128
    connections: int = 2
    queue_max: int = 10_000


class Pipeline:
    """The script calls of one storage on one event loop, sent in batches.

    Args:
        loop: the event loop it serves.
        settings: its connections, deadline and limits (the storage's).
    """

    __slots__ = (
        "__weakref__", "_busy", "_idle", "_loop", "_queue", "_scheduled", "_settings", "batches",
        "closed", "commands",
    )  # fmt: skip

    def __init__(self, loop: asyncio.AbstractEventLoop, settings: PipelineSettings) -> None:
        self._loop = loop
        self._settings = settings
        self._queue: deque[_Command] = deque()
        self._idle: list[Any] = []  # connections not carrying a batch
        self._busy = 0  # connections carrying one (or being made)
        self._scheduled = False
        self.closed = False
        self.batches = 0  # writes made
        self.commands = 0  # commands sent (a NOSCRIPT retry counts again)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop this pipeline serves."""
        return self._loop

    def submit(self, script: Any, keys: Sequence[str], args: Sequence[str]) -> asyncio.Future[Any]:
        """Queue one ``EVALSHA`` of ``script``; the future gets its reply (or a StorageError)."""
        if self.closed:
            raise _closed_error()
        if len(self._queue) >= self._settings.queue_max:
            raise StorageNotReached(
                f"quotaql: {self._settings.queue_max} Redis calls are already waiting in this"
                " process"
            )
        future = self._loop.create_future()
        self._queue.append(_Command(script, keys, args, future))
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._flush)
        return future

    def _flush(self) -> None:
        """Send what is queued, a batch per free connection (the others wait for one)."""
        self._scheduled = False
        queue = self._queue
        settings = self._settings
        limit = settings.limit
        while queue:
            if self._idle:
                connection = self._idle.pop()
            elif self._busy < settings.connections:
                connection = None  # made in the batch's task
            else:
                return  # a connection that comes back flushes again
            batch: list[_Command] = []
            while queue and len(batch) < limit:
                command = queue.popleft()
                if not command.future.done():  # its caller may have stopped waiting
                    batch.append(command)
            if not batch:
                if connection is not None:
                    self._idle.append(connection)
                continue
            self._busy += 1
            self._loop.create_task(self._send(connection, batch))

    async def _send(self, connection: Any, batch: list[_Command]) -> None:
        """Write ``batch`` on ``connection`` and hand out the replies, within one deadline."""
        settings = self._settings
        task = asyncio.current_task(self._loop)
        assert task is not None  # a task of its own, made by _flush
        deadline = settings.deadline(self._loop, task)
        done = 0
        again: list[_Command] = []
        try:
            try:
                if connection is None:
                    connection = settings.make_connection()
                elif _closed(connection):  # the server closed it while idle (a restart)
                    await _disconnect(connection)
                if not connection.is_connected:
                    try:
                        await connection.connect()
                    except (OSError, EOFError, *settings.errors) as exc:  # type: ignore[misc]
                        # Nothing of the batch was sent: the callers may try again.
                        self._lost()
                        _drop(connection)
                        connection = None
                        _fail_all(batch, StorageNotReached(f"Redis failed: cannot connect: {exc}"))
                        return
                packed: list[bytes] = []
                pack = connection.pack_command
                for command in batch:
                    if command.asking:  # redirected by ASK: the next command only
                        packed.extend(pack("ASKING"))
                    keys = command.keys
                    packed.extend(
                        pack("EVALSHA", command.script.sha, len(keys), *keys, *command.args)
                    )
                self.batches += 1
                self.commands += len(batch)
                await connection.send_packed_command(packed, check_health=False)
                read = connection.read_response
                for command in batch:
                    try:
                        if command.asking:
                            await _read_asking(read, settings.errors)
                        reply = await read()
                    except settings.noscript:
                        if command.retried:
                            _fail(command, StorageError("Redis failed: NOSCRIPT after loading it"))
                        else:
                            command.retried = True
                            again.append(command)
                    except settings.errors as exc:
                        if isinstance(exc, OSError | EOFError) or _is_connection_error(exc):
                            raise
                        if not self._redirected(command, exc):  # an error reply: the rest follow
                            _fail(command, storage_error(exc))
                    else:
                        future = command.future
                        if not future.done():
                            future.set_result(reply)
                    done += 1
                if again:  # loaded on this connection, then sent once more with the next batch
                    scripts = {id(command.script): command.script for command in again}
                    for script in scripts.values():
                        await connection.send_command("SCRIPT", "LOAD", script.script)
                        sha = await connection.read_response()
                        script.sha = sha.decode() if isinstance(sha, bytes) else sha
                    self._queue.extendleft(reversed(again))
            except asyncio.CancelledError:
                if deadline.expired and deadline.withdraw():  # our own cancellation: a timeout
                    error: StorageError = StorageTimeout(
                        f"Redis did not answer within {settings.timeout:g} s"
                    )
                    self._lost()
                    _drop(connection)
                    connection = None
                    _fail_all(batch[done:], error)
                    _fail_all(again, error)
                    # The calls queued behind this batch waited as long for a Redis that did
                    # not answer: sent now, each batch of them would wait a timeout more, so a
                    # caller deep in the queue waited many timeouts. Never sent: they may be
                    # tried again (refunds).
                    self._fail_queued(
                        StorageNotReached(
                            f"Redis did not answer the calls ahead within {settings.timeout:g} s"
                        )
                    )
                    return
                _drop(connection)
                connection = None
                _fail_all(batch[done:], StorageError("the Redis call was cancelled"))
                _fail_all(again, StorageError("the Redis call was cancelled"))
                raise
            except (OSError, EOFError, *settings.errors) as exc:  # type: ignore[misc]
                self._lost()
                _drop(connection)
                connection = None
                error = (
                    storage_error(exc)
                    if isinstance(exc, settings.errors)
                    else StorageError(f"Redis failed: {type(exc).__name__}: {exc}")
                )
                _fail_all(batch[done:], error)
                _fail_all(again, error)
            finally:
                deadline.disarm()
        finally:
            self._busy -= 1
            if connection is not None and not self.closed:
                self._idle.append(connection)
            elif connection is not None:
                await _disconnect(connection)
            if self._queue and not self._scheduled and not self.closed:
                self._scheduled = True
                self._loop.call_soon(self._flush)
            elif self.closed:  # calls queued again (after NOSCRIPT) once closed: none flushes
                self._fail_queued(_closed_error())

    def resubmit(self, command: _Command) -> None:
        """Queue ``command`` again, here (a call that did not run where it went first: a
        Redis Cluster's redirection); already counted against ``queue_max`` where it was
        submitted, it is not refused for a full queue."""
        if self.closed:
            _fail(command, _closed_error())
            return
        self._queue.append(command)
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._flush)

    def _redirected(self, command: _Command, error: BaseException) -> bool:
        """Whether ``command``, answered the error reply ``error``, was taken care of
        elsewhere (a Redis Cluster's redirection, see storage/_cluster_pipeline.py); if not,
        it fails with ``error``. A single server redirects nothing."""
        del command, error
        return False

    def _lost(self) -> None:
        """The server could not be reached, or stopped answering (a cluster refreshes its
        map of the slots); nothing to do for a single server."""

    def abandon(self) -> None:
        """Forget a pipeline whose event loop is closed (nothing of it can run again, nor
        wait for what it queued): shut its connections' sockets down, so that Redis lets go
        of them now (their file descriptors are closed when the connections are collected)."""
        self.closed = True
        self._queue.clear()
        idle, self._idle = self._idle, []
        for connection in idle:
            transport = getattr(getattr(connection, "_writer", None), "transport", None)
            sock = None if transport is None else transport.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    async def close(self) -> None:
        """Fail what is queued and close the connections."""
        self.closed = True
        self._fail_queued(_closed_error())
        idle, self._idle = self._idle, []
        for connection in idle:
            await _disconnect(connection)

    def _fail_queued(self, error: StorageError) -> None:
        """Fail every call still queued, unsent, with ``error``."""
        queue = self._queue
        while queue:
            _fail(queue.popleft(), error)


async def _read_asking(read: Callable[[], Any], errors: tuple[type[BaseException], ...]) -> None:
    """Read the reply to ``ASKING`` (``+OK``); an error reply to it leaves the command's own
    reply to be read (and answered) next."""
    try:
        await read()
    except errors as exc:
        if isinstance(exc, OSError | EOFError) or _is_connection_error(exc):
            raise


def _closed_error() -> StorageNotReached:
    return StorageNotReached("the Redis storage is closed")


def _fail(command: _Command, error: StorageError) -> None:
    future = command.future
    if not future.done():
        future.set_exception(error)
        future.exception()  # retrieved: a caller that stopped waiting logs nothing


def _fail_all(commands: Sequence[_Command], error: StorageError) -> None:
    for command in commands:
        _fail(command, error)


def _drop(connection: Any) -> None:
    """Forget a connection that is out of step or broken (closed in the background)."""
    if connection is not None:
        asyncio.get_running_loop().create_task(_disconnect(connection))


async def _disconnect(connection: Any) -> None:
    with contextlib.suppress(Exception):  # closing a broken connection: nothing more to do
        await connection.disconnect(nowait=True)


def _closed(connection: Any) -> bool:
    """The idle ``connection``'s socket has been closed by the other end (its stream saw the
    end of the input, read by the event loop while nobody waited on it)."""
    reader = getattr(connection, "_reader", None)
    return reader is not None and (reader.at_eof() or reader.exception() is not None)


def _is_connection_error(exc: BaseException) -> bool:
    from redis.exceptions import ConnectionError as RedisConnectionError  # noqa: PLC0415
    from redis.exceptions import TimeoutError as RedisTimeoutError  # noqa: PLC0415

    return isinstance(exc, RedisConnectionError | RedisTimeoutError)


def storage_error(exc: BaseException) -> StorageError:
    """The :class:`StorageError` (:class:`StorageTimeout`) a redis-py failure stands for."""
    from redis.exceptions import TimeoutError as RedisTimeoutError  # noqa: PLC0415

    if isinstance(exc, RedisTimeoutError):
        return StorageTimeout(f"Redis did not answer in time: {exc}")
    return StorageError(f"Redis failed: {type(exc).__name__}: {exc}")
