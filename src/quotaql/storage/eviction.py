"""Redis eviction: an evicted budget is a full one, so a Redis storage refuses a server that
may evict its keys.

Every key quotaql writes has a TTL (an idle tenant's bucket disappears once it would be
full again). Under ``maxmemory``, an evicting ``maxmemory-policy`` makes Redis delete keys to
make room: the ``allkeys-*`` policies any key, the ``volatile-*`` ones the keys that have a
TTL, that is every key of quotaql (and them first, on an instance shared with a cache whose
keys have none). A deleted bucket reads as a full one: a drained tenant gets its whole budget
back, and a flood of new subjects (a key each) is what fills the memory. ``noeviction``
answers a write past ``maxmemory`` with an error instead (the limiter's fail mode decides)
and never forgets a debit.

Before its first call (and when asked: ``check_eviction``) a Redis storage reads
``maxmemory`` and ``maxmemory-policy`` from its server, or from every master of a cluster
(``CONFIG GET``), and judges them (:class:`EvictionCheck`):

- ``safe``: ``noeviction`` everywhere, or ``maxmemory 0`` (no limit: Redis never evicts,
  whatever the policy; a warning says that setting ``maxmemory`` later would evict);
- ``allowed``: a master may evict and ``allow_eviction`` accepts it: a warning, once;
- ``refused``: a master may evict and nothing allows it: :class:`~quotaql.errors.EvictionRefused`
  at start-up, and instead of every call (none is sent) until a check finds it changed
  (checks at most once a second while refused);
- ``unverified``: ``CONFIG GET`` answered an error (an ACL without ``config``, a renamed or
  disabled command, a managed service): a warning says what to check by hand.

A check that reaches no server raises the storage's error (the call would have failed
too) and is made again by the next call; one that reaches some masters of a cluster only
judges those and is made again a second later.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from quotaql.errors import EvictionRefused
from quotaql.instrumentation import names
from quotaql.storage._pipeline import storage_error

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "ALLOWED",
    "REFUSED",
    "SAFE",
    "UNVERIFIED",
    "VERDICTS",
    "EvictionCheck",
    "EvictionGuard",
    "NodeMemory",
    "node_memory",
]

NO_EVICTION: Final = "noeviction"
SAFE: Final = names.EVICTION_SAFE
ALLOWED: Final = names.EVICTION_ALLOWED
REFUSED: Final = names.EVICTION_REFUSED
UNVERIFIED: Final = names.EVICTION_UNVERIFIED
#: From the worst: the verdict of a cluster is its worst master's.
VERDICTS: Final = (REFUSED, ALLOWED, UNVERIFIED, SAFE)
UNKNOWN_POLICY: Final = "unknown"
"""The ``policy`` of a server that did not say (``CONFIG GET`` refused)."""
RECHECK_SECONDS: Final = 1.0
"""How long a refusal (or a check that missed some masters) stands before the next one."""
DOCS: Final = "docs/operations.md, 'Redis: the eviction policy'"

_log = logging.getLogger(names.LOGGER)


@dataclass(frozen=True, slots=True)
class NodeMemory:
    """What one Redis server said of its memory.

    Attributes:
        node: ``host:port`` (or the Unix socket's path).
        policy: its ``maxmemory-policy``; None when ``CONFIG GET`` answered an error.
        maxmemory: its ``maxmemory`` in bytes (0: no limit).
        error: the error ``CONFIG GET`` answered, when it did.
    """

    node: str
    policy: str | None
    maxmemory: int = 0
    error: str | None = None

    @property
    def evicts(self) -> bool:
        """Whether Redis may delete keys here to make room: any policy but ``noeviction``
        (one unknown to quotaql too) under a ``maxmemory``."""
        return self.policy is not None and self.policy != NO_EVICTION and self.maxmemory > 0


def node_memory(node: str, reply: object) -> NodeMemory:
    """:class:`NodeMemory` from a server's reply to ``CONFIG GET maxmemory*``: redis-py's
    dict of names to values, or the raw list of names and values (strings or bytes)."""
    values: dict[str, str] = {}
    if isinstance(reply, list | tuple):
        reply = dict(zip(reply[::2], reply[1::2], strict=False))
    if isinstance(reply, dict):
        for key, value in reply.items():
            values[_text(key)] = _text(value)
    policy = values.get("maxmemory-policy")
    if not policy:
        return NodeMemory(node, None, 0, f"CONFIG GET maxmemory* answered {reply!r}")
    try:
        maxmemory = int(values.get("maxmemory", "0"))
    except ValueError:
        return NodeMemory(node, None, 0, f"maxmemory is {values.get('maxmemory')!r}")
    return NodeMemory(node, policy.lower(), maxmemory)


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


@dataclass(frozen=True, slots=True)
class EvictionCheck:
    """What a storage found of its Redis's eviction policy.

    Attributes:
        nodes: each server that answered (every master of a cluster that did).
        allowed: eviction was allowed (``allow_eviction``).
        missing: the masters that did not answer (not judged; checked again later).
    """

    nodes: tuple[NodeMemory, ...]
    allowed: bool
    missing: tuple[str, ...] = ()

    @property
    def evicting(self) -> tuple[NodeMemory, ...]:
        """The servers that may evict quotaql's keys."""
        return tuple(node for node in self.nodes if node.evicts)

    @property
    def unverified(self) -> tuple[NodeMemory, ...]:
        """The servers whose policy could not be read."""
        return tuple(node for node in self.nodes if node.policy is None)

    @property
    def verdict(self) -> str:
        """``refused``, ``allowed``, ``unverified`` or ``safe`` (see the module)."""
        if self.evicting:
            return ALLOWED if self.allowed else REFUSED
        return UNVERIFIED if self.unverified else SAFE

    @property
    def policy(self) -> str:
        """The policy the verdict is about: an evicting master's, ``unknown`` for an
        unverified one, else the first master's (``noeviction``, or a policy that would
        evict under a ``maxmemory``)."""
        evicting = self.evicting
        if evicting:
            return str(evicting[0].policy)
        if self.unverified or not self.nodes:
            return UNKNOWN_POLICY
        return str(self.nodes[0].policy)

    def explain(self) -> str:
        """The verdict in words: what was found, what it means and what to do."""
        verdict = self.verdict
        if verdict in (REFUSED, ALLOWED):
            found = _listing(
                f"{node.node} (maxmemory-policy {node.policy}, maxmemory {node.maxmemory})"
                for node in self.evicting
            )
            risk = (
                "an evicted budget is a full one: a drained tenant gets all of it back, and a"
                " flood of new subjects (a key each) is what fills the memory"
            )
            if verdict == REFUSED:
                return (
                    f"quotaql refuses the Redis at {found}: it may evict quotaql's keys, and"
                    f" {risk}. Set maxmemory-policy noeviction (CONFIG SET maxmemory-policy"
                    " noeviction, and in redis.conf or the service's parameters), on an"
                    " instance of quotaql's own; or accept the risk with [redis]"
                    " allow_eviction = true (RedisStorage(allow_eviction=True))."
                    f" See {DOCS}."
                )
            return (
                f"quotaql runs on the Redis at {found}, which may evict its keys: {risk}."
                " [redis] allow_eviction = true accepts that; set maxmemory-policy"
                f" noeviction to stop it. See {DOCS}."
            )
        if verdict == UNVERIFIED:
            found = _listing(f"{node.node} answered {node.error!r}" for node in self.unverified)
            return (
                f"quotaql could not read the eviction policy of Redis (CONFIG GET maxmemory*:"
                f" {found}): check by hand that maxmemory-policy is noeviction (or maxmemory"
                f" 0) on every server quotaql uses; an evicting policy gives evicted budgets"
                f" back in full. Allow CONFIG GET to quotaql's Redis user (+config|get) to have"
                f" it checked at start-up. See {DOCS}."
            )
        latent = [node for node in self.nodes if node.policy != NO_EVICTION]
        if latent:
            found = _listing(f"{node.node} has maxmemory-policy {node.policy}" for node in latent)
            return (
                f"quotaql: Redis at {found} with maxmemory 0 (no limit): nothing is evicted"
                " now, but setting a maxmemory later would evict quotaql's keys; set"
                f" maxmemory-policy noeviction first. See {DOCS}."
            )
        return "quotaql: Redis evicts nothing (maxmemory-policy noeviction)"


def _listing(parts: Any) -> str:
    return "; ".join(parts)


class EvictionGuard:
    """The eviction check of one storage: whether calls may go, the last check, its log.

    Args:
        allowed: eviction is allowed (the storage's ``allow_eviction``, or ``[redis]
            allow_eviction`` once the gate says so: :attr:`allowed` may be set).
        clock: monotonic seconds (tests inject their own).
    """

    __slots__ = ("_clock", "_due", "_said", "allowed", "check", "passed")

    def __init__(self, allowed: bool = False, clock: Any = time.monotonic) -> None:
        self.allowed = allowed
        self.check: EvictionCheck | None = None
        """The last check (None before the first one that reached a server)."""
        self.passed = False
        """Calls go without a check: the last one judged every master and refused nothing."""
        self._clock = clock
        self._due = 0.0
        self._said: tuple[str, str] | None = None  # the last verdict logged, and its text

    def must_check(self) -> bool:
        """Whether a call that is not :attr:`passed` checks first (True), or goes at once
        (False: a check that missed some masters a moment ago).

        Raises:
            EvictionRefused: a refusal made less than a second ago (no call, no check).
        """
        if self._clock() >= self._due:
            return True
        check = self.check
        if check is not None and check.verdict == REFUSED:
            if self.allowed:  # allowed since: check again now
                return True
            raise EvictionRefused(check.explain())
        return False

    def judge(self, replies: Sequence[tuple[str, object]], forbidden: Any) -> EvictionCheck:
        """Judge each master's reply to ``CONFIG GET maxmemory*`` (a dict, or the exception
        its call raised: ``forbidden(exc)`` says an error reply that means the command is
        not allowed), remember and log the verdict, and return it.

        Raises:
            EvictionRefused: a master may evict, and eviction is not allowed.
            StorageError: no master answered (the first one's error).
        """
        nodes: list[NodeMemory] = []
        missing: list[tuple[str, BaseException]] = []
        for node, reply in replies:
            if not isinstance(reply, BaseException):
                nodes.append(node_memory(node, reply))
            elif forbidden(reply):
                nodes.append(NodeMemory(node, None, 0, str(reply)))
            else:
                missing.append((node, reply))
        if not nodes and missing:
            raise storage_error(missing[0][1]) from missing[0][1]
        check = EvictionCheck(tuple(nodes), self.allowed, tuple(node for node, _ in missing))
        self.check = check
        verdict = check.verdict
        self.passed = verdict != REFUSED and not missing
        self._due = self._clock() + RECHECK_SECONDS
        self._say(check)
        if verdict == REFUSED:
            raise EvictionRefused(check.explain())
        return check

    def _say(self, check: EvictionCheck) -> None:
        """Log the verdict when it changed: an error for a refusal, a warning for what
        must be looked at (allowed, unverified, a policy that would evict under a
        ``maxmemory``)."""
        verdict, text = check.verdict, check.explain()
        if self._said == (verdict, text):
            return
        self._said = (verdict, text)
        if verdict == REFUSED:
            level = logging.ERROR
        elif verdict in (ALLOWED, UNVERIFIED) or any(
            node.policy != NO_EVICTION for node in check.nodes
        ):
            level = logging.WARNING
        else:
            level = logging.DEBUG
        _log.log(level, text, extra={names.LOG_EVENT: names.REDIS_EVICTION_EVENT})
