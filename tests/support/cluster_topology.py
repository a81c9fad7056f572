"""What a test asks of a running Redis Cluster's topology, and how it changes it.

:class:`ClusterTopology` is the part of :class:`tests.support.servers.RedisCluster` that reads
who owns which slot (``CLUSTER SLOTS``), and changes it the two ways a production cluster
does: a master dies and its replica is promoted (:meth:`ClusterTopology.fail_over`), and
a slot moves to another master (:meth:`ClusterTopology.migrate_slot`, ``CLUSTER SETSLOT``
and ``MIGRATE`` as ``redis-cli --cluster reshard`` does them). Every wait is bounded.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, NamedTuple

import redis
from redis.crc import key_slot

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.support.servers import RedisServer

__all__ = ["ClusterTopology", "Failover", "Migration"]

_POLL = 0.02  # seconds between two looks at a changing topology


class Failover(NamedTuple):
    """What :meth:`ClusterTopology.fail_over` did and how long it took.

    Attributes:
        killed: the port of the master SIGKILLed.
        promoted: the port of its replica, master of its slots afterwards.
        killed_at: ``time.monotonic()`` of the SIGKILL.
        seconds: from the SIGKILL until every live node saw the replica own the slots, in
            ``cluster_state:ok``.
    """

    killed: int
    promoted: int
    killed_at: float
    seconds: float


class Migration(NamedTuple):
    """What :meth:`ClusterTopology.migrate_slot` moved.

    Attributes:
        slot: the slot moved.
        source: the port of its master before.
        target: the port of its master after.
        keys: the keys ``MIGRATE`` moved.
        seconds: from ``SETSLOT ... IMPORTING`` until every master agreed on the new owner.
    """

    slot: int
    source: int
    target: int
    keys: int
    seconds: float


class ClusterTopology:
    """Slots, masters and replicas of a running cluster, failover and slot migration.

    Mixed into ``RedisCluster``, which provides ``host``, ``nodes`` (each node's
    :class:`~tests.support.servers.RedisServer`) and ``_startup_timeout``.
    """

    host: str
    nodes: list[RedisServer]
    _startup_timeout: float
    _replicas: int

    # -- reading ------------------------------------------------------------------------------

    def node(self, port: int) -> RedisServer:
        """The node listening on ``port``."""
        for node in self.nodes:
            if node.port == port:
                return node
        msg = f"no node of the cluster listens on {port}"
        raise LookupError(msg)

    def _live_port(self) -> int:
        for node in self.nodes:
            if node.running:
                return node.port
        msg = "no node of the cluster is running"
        raise RuntimeError(msg)

    def _ask(self, port: int | None, *command: object) -> object:
        with redis.Redis(self.host, port or self._live_port(), socket_timeout=5) as client:
            return client.execute_command(*command)

    def cluster_info(self, port: int | None = None) -> dict[str, str]:
        """``CLUSTER INFO`` of one node (the first running one by default)."""
        info: dict[str, str] = self._ask(port, "CLUSTER INFO")  # type: ignore[assignment]
        return info

    def _slot_rows(self, port: int | None = None) -> list[list[object]]:
        rows: list[list[object]] = self._ask(port, "CLUSTER SLOTS")  # type: ignore[assignment]
        return rows

    def slot_ranges(self, port: int | None = None) -> dict[int, list[tuple[int, int]]]:
        """Master port -> the slot ranges it owns, from ``CLUSTER SLOTS`` (of node ``port``)."""
        owners: dict[int, list[tuple[int, int]]] = {}
        for start, end, master, *_replicas in self._slot_rows(port):
            owners.setdefault(int(master[1]), []).append((int(start), int(end)))  # type: ignore[index, call-overload]
        return owners

    def masters(self) -> list[int]:
        """The ports of the masters that own slots, as the first running node sees them."""
        return sorted(self.slot_ranges())

    @staticmethod
    def slot_of(key: str | bytes) -> int:
        """The hash slot of ``key`` (its hash tag's, if it has one)."""
        return int(key_slot(key.encode() if isinstance(key, str) else key))

    def master_of_slot(self, slot: int, port: int | None = None) -> int:
        """The port of the master that owns ``slot`` (as node ``port`` sees it)."""
        for owner, ranges in self.slot_ranges(port).items():
            if any(start <= slot <= end for start, end in ranges):
                return owner
        msg = f"slot {slot} is not served by any node"
        raise LookupError(msg)

    def node_for_key(self, key: str | bytes) -> int:
        """The port of the master that owns ``key``."""
        return self.master_of_slot(self.slot_of(key))

    def replicas_of(self, port: int) -> list[int]:
        """The ports of the replicas of master ``port`` (``CLUSTER SLOTS`` lists them)."""
        for _start, _end, master, *replicas in self._slot_rows():
            if int(master[1]) == port:  # type: ignore[index, call-overload]
                return sorted(int(replica[1]) for replica in replicas)  # type: ignore[index, call-overload]
        return []

    def hash_tags_by_master(self) -> dict[int, str]:
        """One hash tag per master (``"a"`` -> keys ``{a}...``), for spreading tenants."""
        owners = self.slot_ranges()
        tags: dict[int, str] = {}
        for index in range(10_000):
            tag = chr(ord("a") + index) if index < 26 else f"t{index}"
            slot = self.slot_of(tag)
            owner = next(p for p, rs in owners.items() if any(a <= slot <= b for a, b in rs))
            tags.setdefault(owner, tag)
            if len(tags) == len(owners):
                return tags
        msg = "could not find a hash tag for every master"  # pragma: no cover
        raise LookupError(msg)  # pragma: no cover

    def flushall(self) -> None:
        """``FLUSHALL`` on every running master (replicas follow)."""
        for port in self.masters():
            self._ask(port, "FLUSHALL")

    # -- replicas -----------------------------------------------------------------------------

    def wait_replicas_linked(self, timeout: float | None = None) -> None:
        """Wait until every running replica's link to its master is up and every running
        node lists ``replicas`` replicas for each master (bounded)."""
        deadline = time.monotonic() + (timeout or self._startup_timeout)
        for node in self.nodes:
            if not node.running:
                continue
            while True:
                info = node.info("replication")
                if info.get("role") != "slave" or info.get("master_link_status") == "up":
                    break
                if time.monotonic() > deadline:
                    msg = f"replica {node.port} not linked to its master: {info}"
                    raise TimeoutError(msg)
                time.sleep(_POLL)
        replicas = self._replicas

        def listed(port: int) -> bool:
            rows = self._slot_rows(port)
            return all(len(row) - 3 >= replicas for row in rows)

        self._wait_until(listed, deadline, "replicas not listed by every node")

    def fail_over(self, port: int, timeout: float = 30.0) -> Failover:
        """SIGKILL master ``port`` (by its PID) and wait until its replica is promoted.

        Done when every running node says ``cluster_state:ok`` and that the replica owns the
        slots the master owned. The killed node stays down.

        Raises:
            LookupError: ``port`` is not a master with a replica.
            TimeoutError: no promotion within ``timeout`` seconds.
        """
        ranges = self.slot_ranges().get(port)
        replicas = self.replicas_of(port)
        if not ranges or not replicas:
            msg = f"{port} is not a master with a replica (ranges {ranges}, replicas {replicas})"
            raise LookupError(msg)
        slot = ranges[0][0]
        killed_at = time.monotonic()
        self.node(port).kill()
        self._wait_until(
            lambda live: self.master_of_slot(slot, live) in replicas,
            killed_at + timeout,
            f"no replica of {port} promoted",
        )
        promoted = self.master_of_slot(slot)
        return Failover(port, promoted, killed_at, time.monotonic() - killed_at)

    def rejoin(self, port: int, timeout: float = 30.0) -> None:
        """Start the killed node ``port`` again (same port, same ``nodes.conf``): it rejoins
        as a replica of the master that took its slots; wait until it is linked and listed."""
        self.node(port).start()
        self.wait_replicas_linked(timeout)

    def _wait_until(self, agreed: Callable[[int], bool], deadline: float, what: str) -> None:
        """Poll every running node until each is ``ok`` and ``agreed(port)``."""
        while True:
            try:
                if all(
                    self.cluster_info(node.port).get("cluster_state") == "ok" and agreed(node.port)
                    for node in self.nodes
                    if node.running
                ):
                    return
            except (redis.RedisError, LookupError):
                pass  # a node mid-change: look again
            if time.monotonic() > deadline:
                states: dict[int, object] = {}
                for node in self.nodes:
                    try:
                        states[node.port] = node.running and self.cluster_info(node.port)
                    except redis.RedisError as exc:
                        states[node.port] = exc
                msg = f"{what}: {states}"
                raise TimeoutError(msg)
            time.sleep(_POLL)

    # -- resharding ---------------------------------------------------------------------------

    def migrate_slot(
        self,
        slot: int,
        target: int,
        *,
        batch: int = 100,
        hold: float = 0.0,
        timeout: float = 30.0,
    ) -> Migration:
        """Move ``slot`` to master ``target`` as ``redis-cli --cluster reshard`` does.

        ``CLUSTER SETSLOT slot IMPORTING`` on the target, ``MIGRATING`` on the source; the
        keys, ``batch`` at a time (``CLUSTER GETKEYSINSLOT`` + ``MIGRATE ... KEYS``); then
        ``SETSLOT slot NODE target`` on the target, the source and every other master.

        Args:
            hold: seconds to stay in each state before the next: migrating with the keys
                still on the source, and migrating with them moved (where the source answers
                ``-ASK`` for them), so that traffic meets both.
        """
        source = self.master_of_slot(slot)
        if source == target:
            msg = f"slot {slot} is already on {target}"
            raise ValueError(msg)
        started = time.monotonic()
        ids = {port: self._node_id(port) for port in [*self.masters(), target]}
        self._ask(target, "CLUSTER SETSLOT", slot, "IMPORTING", ids[source])
        self._ask(source, "CLUSTER SETSLOT", slot, "MIGRATING", ids[target])
        time.sleep(hold)
        moved = 0
        while True:
            keys = self._ask(source, "CLUSTER GETKEYSINSLOT", slot, batch)
            assert isinstance(keys, list)
            if not keys:
                break
            self._ask(source, "MIGRATE", self.host, target, "", 0, 5000, "KEYS", *keys)
            moved += len(keys)
        time.sleep(hold)
        for port in [target, source, *(p for p in ids if p not in (source, target))]:
            self._ask(port, "CLUSTER SETSLOT", slot, "NODE", ids[target])
        self._wait_until(
            lambda live: self.master_of_slot(slot, live) == target,
            time.monotonic() + timeout,
            f"slot {slot} not moved to {target}",
        )
        return Migration(slot, source, target, moved, time.monotonic() - started)

    def _node_id(self, port: int) -> str:
        node_id = self._ask(port, "CLUSTER MYID")
        return node_id.decode() if isinstance(node_id, bytes) else str(node_id)
