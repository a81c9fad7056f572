"""Implicit pipelining on a Redis Cluster: one :class:`~quotaql.storage._pipeline.Pipeline`
per master, the calls of one loop iteration grouped by the master that owns their slot.

A decision's keys share one hash tag (storage/keys.py), so the slot of its first key is the
slot of all of them: :class:`ClusterPipelines` hashes it (``CRC16 mod 16384``, as redis-py's
``keyslot``), looks the owner up in the cluster client's slot map (its ``nodes_manager``,
discovered and kept by redis-py) and queues the call on that master's pipeline, made lazily
with connections of its own. Each master's batch goes out and is read on its own: a slow or
dead master holds up only the calls that were for it.

What a master answers instead of running a call is handled for that call alone; none of these
replies means the script ran, so following them never debits twice:

- ``MOVED <slot> <host:port>`` (the slot has a new owner: a finished migration, a failover):
  the slot map takes the new owner (redis-py's ``move_slot``) and the call goes to it, at most
  :data:`MAX_REDIRECTS` times;
- ``ASK <slot> <host:port>`` (the slot is migrating and the tenant's keys have left): the
  call goes once to that node, after ``ASKING`` in the same write;
- ``TRYAGAIN`` (some of the keys moved, some not) and ``CLUSTERDOWN``: the call is sent again
  after :data:`TRY_AGAIN_DELAY` (twice that, then three times), at most :data:`MAX_TRIES`
  times, then fails as a storage error (the limiter's fail mode answers); ``CLUSTERDOWN``
  also refreshes the slot map;
- ``NOSCRIPT``: the master's pipeline loads the script on that connection and sends the call
  again (storage/_pipeline.py), so a master restarted or promoted gets the script on its own.

A master that cannot be reached fails the calls of its batch (:class:`StorageNotReached`:
nothing was sent), one that breaks off mid-batch fails those whose replies were not read (a
:class:`StorageError`: they may have run; never sent again, an ``acquire`` would debit
twice), one that does not answer within the deadline fails its batch and its queue; each
refreshes the slot map in the background (at most one refresh at a time, and not more often
than every :data:`REFRESH_INTERVAL`), so that after a failover the next calls go to the
promoted replica. The other masters' calls are not touched.

redis-py's own ``ClusterPipeline`` (redis.asyncio.cluster) groups commands by node too, but is
not used: it waits for every node's batch before answering any (a stalled master holds every
caller of the write), raises the first node's connection error for the whole pipeline (and,
with retries, sends again commands that had already run, among them any whose reply was
falsy), follows MOVED/ASK/TRYAGAIN by sending each redirected command alone, one after the
other, leaves NOSCRIPT to the caller, has no bound on its queue nor a deadline per batch, and
costs a command-policy lookup per command. Its slot map, ``keyslot`` and error classes are
what this module uses.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from typing import TYPE_CHECKING, Any

from redis.crc import key_slot
from redis.exceptions import (
    AskError,
    ClusterDownError,
    MovedError,
    RedisClusterException,
    RedisError,
    TryAgainError,
)

from quotaql.errors import StorageNotReached
from quotaql.storage._pipeline import Pipeline, PipelineSettings, _fail

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from quotaql.storage._pipeline import _Command

# What reading the slot map may raise (a lock of another event loop's: RuntimeError).
_MAP_ERRORS = (RedisError, RedisClusterException, OSError, RuntimeError, KeyError)

__all__ = [
    "MAX_REDIRECTS",
    "MAX_TRIES",
    "REFRESH_INTERVAL",
    "TRY_AGAIN_DELAY",
    "ClusterPipelines",
]

MAX_REDIRECTS = 3  # MOVED / ASK followed per call; past them the call fails
MAX_TRIES = 3  # TRYAGAIN / CLUSTERDOWN: sent again this many times at most
TRY_AGAIN_DELAY = 0.005  # seconds before the first new try (then 2×, 3×)
REFRESH_INTERVAL = 0.1  # seconds between two refreshes of the slot map
REFRESH_TIMEOUT = 2.0  # seconds one refresh may take (in the background)


class _NodePipeline(Pipeline):
    """The pipeline of one master: its error replies and failures go to its cluster's
    :class:`ClusterPipelines`."""

    __slots__ = ("_cluster", "node")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        settings: PipelineSettings,
        cluster: ClusterPipelines,
        node: str,
    ) -> None:
        super().__init__(loop, settings)
        self._cluster = cluster
        self.node = node  # "host:port"

    def _redirected(self, command: _Command, error: BaseException) -> bool:
        return self._cluster.redirected(command, error)

    def _lost(self) -> None:
        self._cluster.refresh()


class ClusterPipelines:
    """The script calls of one storage on one event loop, on a Redis Cluster: a pipeline per
    master, each call on the pipeline of the master that owns its slot.

    ``queue_max`` (of ``settings``) bounds each master's queue. ``batches`` and ``commands``
    add up every master's (the metrics read them as they read a single pipeline's).

    Args:
        loop: the event loop it serves.
        settings: the storage's pipeline settings (each master's connections are its own).
        client: the storage's initialized ``redis.asyncio.cluster.RedisCluster``.
    """

    __slots__ = (
        "__weakref__", "_client", "_loop", "_pipelines", "_refreshed", "_refreshing",
        "_settings", "closed", "redirects",
    )  # fmt: skip

    def __init__(
        self, loop: asyncio.AbstractEventLoop, settings: PipelineSettings, client: Any
    ) -> None:
        self._loop = loop
        self._settings = settings
        self._client = client
        self._pipelines: dict[str, _NodePipeline] = {}  # "host:port" -> its pipeline
        self._refreshing: asyncio.Task[None] | None = None
        self._refreshed = -REFRESH_INTERVAL  # loop time of the last refresh's end
        self.closed = False
        self.redirects = {"moved": 0, "ask": 0, "tryagain": 0, "clusterdown": 0, "refresh": 0}
        """What the masters answered instead of running a call, and the slot map's refreshes."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop these pipelines serve."""
        return self._loop

    @property
    def pipelines(self) -> dict[str, Pipeline]:
        """Each master's pipeline ("host:port"), made when a call first went to it."""
        return dict(self._pipelines)

    @property
    def batches(self) -> int:
        """Writes made, on every master."""
        return sum(pipeline.batches for pipeline in self._pipelines.values())

    @property
    def commands(self) -> int:
        """Commands sent, on every master (a command sent again counts again)."""
        return sum(pipeline.commands for pipeline in self._pipelines.values())

    def submit(self, script: Any, keys: Sequence[str], args: Sequence[str]) -> asyncio.Future[Any]:
        """Queue one ``EVALSHA`` of ``script`` on the master of ``keys[0]``'s slot; the future
        gets its reply (or a StorageError)."""
        if self.closed:
            raise StorageNotReached("the Redis storage is closed")
        return self._owner(keys[0]).submit(script, keys, args)

    def _owner(self, key: str) -> _NodePipeline:
        """The pipeline of the master that owns ``key``'s slot, in the slot map."""
        try:
            node = self._client.nodes_manager.get_node_from_slot(key_slot(key.encode()))
        except _MAP_ERRORS as exc:  # a slot no master serves (SlotNotCoveredError)
            raise StorageNotReached(f"Redis failed: {exc}") from exc
        return self._pipeline(node)

    def _pipeline(self, node: Any) -> _NodePipeline:
        """The pipeline of ``node`` (a redis-py ``ClusterNode``), made the first time."""
        pipeline = self._pipelines.get(node.name)
        if pipeline is None:
            settings = dataclasses.replace(self._settings, make_connection=_connector(node))
            pipeline = _NodePipeline(self._loop, settings, self, node.name)
            self._pipelines[node.name] = pipeline
        return pipeline

    def redirected(self, command: _Command, error: BaseException) -> bool:
        """Follow a master's MOVED, ASK, TRYAGAIN or CLUSTERDOWN answer to ``command``:
        True if the call was sent on (or nobody waits for it any more), False if it fails
        with ``error`` (another error, or past the bounds)."""
        if isinstance(error, AskError):  # MOVED is an ASK too
            if command.future.done():
                return True  # nobody waits; the call did not run: nothing to send
            moved = isinstance(error, MovedError)
            if command.redirects >= MAX_REDIRECTS or (command.asking and not moved):
                return False
            command.redirects += 1
            manager = self._client.nodes_manager
            if moved:
                self.redirects["moved"] += 1
                command.asking = False
                try:
                    manager.move_slot(error)  # the slot's new owner, in the map
                except _MAP_ERRORS:
                    self.refresh()
            else:
                self.redirects["ask"] += 1
                command.asking = True
            node = manager.get_node(host=error.host, port=error.port)
            if node is None:  # a node the map does not know yet (ASK during a reshard)
                from redis.asyncio.cluster import ClusterNode  # noqa: PLC0415

                node = ClusterNode(error.host, error.port, **manager.connection_kwargs)
            self._pipeline(node).resubmit(command)
            return True
        down = isinstance(error, ClusterDownError)
        if down or isinstance(error, TryAgainError):
            if command.future.done():
                return True
            if command.tries >= MAX_TRIES:
                return False
            command.tries += 1
            command.asking = False  # sent again to the slot's owner
            self.redirects["clusterdown" if down else "tryagain"] += 1
            if down:
                self.refresh()
            self._loop.call_later(TRY_AGAIN_DELAY * command.tries, self._again, command)
            return True
        return False

    def _again(self, command: _Command) -> None:
        """Send ``command`` again, to its slot's owner now (after TRYAGAIN / CLUSTERDOWN)."""
        if command.future.done():
            return
        if self.closed:
            _fail(command, StorageNotReached("the Redis storage is closed"))
            return
        try:
            pipeline = self._owner(command.keys[0])
        except StorageNotReached as exc:
            _fail(command, exc)
            return
        pipeline.resubmit(command)

    def refresh(self) -> None:
        """Read the slot map again from the cluster, in the background: at most one refresh
        at a time, not more often than every :data:`REFRESH_INTERVAL`."""
        if self.closed or self._refreshing is not None:
            return
        if self._loop.time() - self._refreshed < REFRESH_INTERVAL:
            return
        self._refreshing = self._loop.create_task(self._refresh())

    async def _refresh(self) -> None:
        try:
            async with asyncio.timeout(REFRESH_TIMEOUT):
                await self._client.nodes_manager.initialize()
            self.redirects["refresh"] += 1
        except (TimeoutError, *_MAP_ERRORS):
            pass  # no node answered: the next failure tries again
        finally:
            self._refreshing = None
            self._refreshed = self._loop.time()

    def abandon(self) -> None:
        """:meth:`Pipeline.abandon` for each master's pipeline (the loop is closed)."""
        self.closed = True
        for pipeline in self._pipelines.values():
            pipeline.abandon()

    async def close(self) -> None:
        """Fail what is queued and close every master's connections."""
        self.closed = True
        task, self._refreshing = self._refreshing, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        for pipeline in self._pipelines.values():
            with contextlib.suppress(Exception):
                await pipeline.close()


def _connector(node: Any) -> Callable[[], Any]:
    """Makes new connections to ``node`` (a redis-py ``ClusterNode``) with its settings, no
    retries (as the node's own pool makes them: the pipeline handles failures)."""
    from redis.asyncio.retry import Retry  # noqa: PLC0415
    from redis.backoff import NoBackoff  # noqa: PLC0415

    kwargs = {**node.connection_kwargs, "retry": Retry(NoBackoff(), 0)}
    connection_class = node.connection_class

    def make() -> Any:
        return connection_class(**kwargs)

    return make
