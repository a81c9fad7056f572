"""Quotas (what a budget allows) and decisions (what the limiter answered)."""

from __future__ import annotations

import base64
import hashlib
import math
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal, NamedTuple, get_args

from quotaql.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["Algorithm", "Decision", "Quota", "QuotaStatus", "Reason", "Source", "combine"]

Algorithm = Literal["token_bucket", "gcra", "sliding_log", "sliding_counter", "fixed_window"]
Source = Literal["memory", "redis", "fallback", "fail_open", "fail_closed"]
Reason = Literal["rate_limited", "exceeds_capacity", "backend_unavailable"]

ALGORITHM_NAMES: tuple[str, ...] = get_args(Algorithm)
_STATE_MARKS = {
    "token_bucket": "",
    "gcra": "gcra",
    "sliding_log": "log",
    "sliding_counter": "sc",
    "fixed_window": "fw",
}
_BUCKETS = ("token_bucket", "gcra")
MAX_DELAY_SECONDS = 60.0  # the longest a reservation may wait
#: The name of the time quota (``[limits] time``): milliseconds of worker time, checked at
#: cost 0 before an operation runs and charged what it took after (docs/limiter.md).
TIME_QUOTA = "time"
# Quota names become part of storage keys: printable, no spaces, no braces (hash tags).
_NAME = re.compile(r"[A-Za-z0-9_.:@/+=-]{1,128}")


@dataclass(frozen=True, slots=True)
class Quota:
    """One budget: a bucket (capacity, refill rate) or a window (limit, window length).

    Example:
        >>> Quota("tenant", capacity=1000, refill_per_second=50).params
        (1000.0, 0.05)
        >>> Quota("daily", limit=100_000, window_seconds=86_400, algorithm="sliding_counter").params
        (100000.0, 86400000)

    Attributes:
        name: names the quota in keys, decisions and headers (``[A-Za-z0-9_.:@/+=-]``).
        capacity: bucket size (``token_bucket``, ``gcra``): the largest burst.
        refill_per_second: bucket refill rate.
        limit: cost allowed per window (``sliding_log``, ``sliding_counter``,
            ``fixed_window``).
        window_seconds: window length (whole milliseconds).
        algorithm: one of ``token_bucket`` (default), ``gcra``, ``sliding_log``,
            ``sliding_counter``, ``fixed_window``.
        shared: one budget for every tenant (a platform-wide quota) instead of one each.
        scope: one budget per scope inside each tenant (a user of the tenant, for the
            ``per_user`` quota); its state is apart from the unscoped quota's and from
            every other scope's.
        refundable: gets back what an operation did not use (the default). A root
            field's quota is not: it pays its field's estimate, and the actual cost is not
            known per root field, so a refund would be one it did not earn.
        max_delay: seconds a request that does not fit now may wait for its turn instead of
            being refused (``token_bucket`` and ``gcra`` only; 0, the default: refuse). Its
            cost is reserved at once (the bucket goes below empty) and the decision's
            ``delay`` says how long to wait before running it.
        max_queued: with ``max_delay``, the most requests waiting for their turn at once (per
            tenant, or per scope); one more is refused, its ``retry_after`` when the first
            waiting one runs. 0 (the default): only ``max_delay`` bounds the wait.
        shards: a ``shared`` quota kept as that many buckets (or windows) of a ``shards``-th
            of its capacity (or limit) and rate, on as many Redis Cluster hash tags
            (``[global] shards``; 1, the default: one, as it always was). A subject debits
            one shard, and one other at most (the limiter's ``quotaql.limiter.shards``;
            docs/scale-out.md: "Sharded shared quotas").
        shard: the shard a debit of this quota was made on (from 0), which the limiter
            names on the refund or the overage of a decision that its subject's second
            shard allowed; None (the default): the subject's own shard.
    """

    name: str
    capacity: float | None = None
    refill_per_second: float | None = None
    limit: float | None = None
    window_seconds: float | None = None
    algorithm: Algorithm = "token_bucket"
    shared: bool = False
    scope: str | None = None
    refundable: bool = True
    max_delay: float = 0.0
    max_queued: int = 0
    shards: int = 1
    shard: int | None = None
    params: tuple[float, float] = field(init=False, repr=False, compare=False)
    check_params: tuple[float, float, int] = field(init=False, repr=False, compare=False)
    """:attr:`params` and the most a reservation may wait (ms), as the checks take them."""
    maximum: float = field(init=False, repr=False, compare=False)
    """The most this quota allows at once: its capacity or its limit."""
    script_args: str = field(init=False, repr=False, compare=False)
    """The algorithm and its parameters as the Redis script reads them (exact floats)."""
    state_name: str = field(init=False, repr=False, compare=False)
    """The name of this quota's state in a storage: the name, and a mark of the algorithm
    unless it is the default token bucket. Two quotas of one name but different algorithms
    (a tenant moving from a token-bucket tier to a window tier, an edited config) keep
    separate states, so neither reads the other's."""
    state_group: str | None = field(init=False, repr=False, compare=False)
    """Which of its tenant's state groups holds this quota's state: ``~q`` (the tenant's
    own), ``~u:<scope>`` (one user's), or None for a sliding log (which keeps its own).
    The Redis storage keeps each group in one hash, one field per quota (:attr:`state_field`),
    so a decision reads and writes each group once."""
    state_field: str = field(init=False, repr=False, compare=False)
    """The name of this quota's state within its group: :attr:`state_name` without the
    scope."""
    script_head: str = field(init=False, repr=False, compare=False)
    """The algorithm and its parameters, without the delay (the Redis request adds it)."""
    script_spec: str = field(init=False, repr=False, compare=False)
    """:attr:`script_args` and where the state is, as the Redis script reads them for a call
    of this quota alone."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ConfigError(
                f"quota name {self.name!r} must be 1-128 characters of A-Z a-z 0-9 _ . : @ / + = -"
            )
        where = f"quota {self.name!r}"
        if self.algorithm not in ALGORITHM_NAMES:
            raise ConfigError(
                f"{where}: unknown algorithm {self.algorithm!r}"
                f" (expected one of {', '.join(ALGORITHM_NAMES)})"
            )
        if self.algorithm in _BUCKETS:
            for unused in ("limit", "window_seconds"):
                if getattr(self, unused) is not None:
                    raise ConfigError(
                        f"{where}: {self.algorithm} takes capacity and refill_per_second,"
                        f" not {unused}"
                    )
            capacity = _positive(where, "capacity", self.capacity)
            rate = _positive(where, "refill_per_second", self.refill_per_second)
            maximum = capacity
            if self.algorithm == "token_bucket":
                params = (capacity, rate / 1000)
            else:
                params = (capacity, 1000 / rate)  # one unit of cost every `interval` ms
        else:
            for unused in ("capacity", "refill_per_second"):
                if getattr(self, unused) is not None:
                    raise ConfigError(
                        f"{where}: {self.algorithm} takes limit and window_seconds, not {unused}"
                    )
            limit = maximum = _positive(where, "limit", self.limit)
            window_ms = round(_positive(where, "window_seconds", self.window_seconds) * 1000)
            if window_ms < 1:
                raise ConfigError(f"{where}: window_seconds must be at least 0.001")
            params = (limit, window_ms)
            if self.max_delay:
                raise ConfigError(
                    f"{where}: max_delay needs token_bucket or gcra; a window has no turns"
                    f" to wait for ({self.algorithm})"
                )
        delay = self.max_delay
        if (
            isinstance(delay, bool)
            or not isinstance(delay, int | float)
            or not 0 <= delay <= MAX_DELAY_SECONDS
        ):
            raise ConfigError(
                f"{where}: max_delay must be seconds from 0 to {MAX_DELAY_SECONDS:g}, got {delay!r}"
            )
        delay_ms = round(delay * 1000)
        queued = self.max_queued
        if isinstance(queued, bool) or not isinstance(queued, int) or queued < 0:
            raise ConfigError(f"{where}: max_queued must be an integer >= 0, got {queued!r}")
        if queued and not delay_ms:
            raise ConfigError(f"{where}: max_queued needs max_delay (nothing waits without it)")
        _check_shards(where, self.shards, self.shard, shared=self.shared)
        object.__setattr__(self, "params", params)
        object.__setattr__(self, "check_params", (*params, delay_ms))
        object.__setattr__(self, "maximum", maximum)
        # repr() of a float reads back to the same double in Lua's tonumber.
        head = f"{self.algorithm} {float(params[0])!r} {float(params[1])!r}"
        args = f"{head} {delay_ms}"
        object.__setattr__(self, "script_args", args)
        object.__setattr__(self, "script_head", head)
        # "~" is not allowed in names: no quota's state name is another's.
        mark = _STATE_MARKS[self.algorithm]
        state_field = state_name = f"{self.name}~{mark}" if mark else self.name
        group = "~q"
        if self.scope is not None:
            if not isinstance(self.scope, str) or not self.scope:
                raise ConfigError(f"{where}: scope must be a non-empty string, got {self.scope!r}")
            # "!" is not allowed in names either: a scope never reads another quota's state.
            token = _scope_token(self.scope)
            state_name = f"{state_name}!{token}"
            group = f"~u:{token}"
        # "~" starts no quota name: no group's name is a sliding log's key.
        logged = self.algorithm == "sliding_log"
        object.__setattr__(self, "state_name", state_name)
        object.__setattr__(self, "state_group", None if logged else group)
        object.__setattr__(self, "state_field", state_field)
        if queued:  # its waiting requests' set is the call's second key
            object.__setattr__(self, "script_spec", f"{head} {delay_ms}:{queued}:2 1 {state_field}")
        else:
            object.__setattr__(self, "script_spec", f"{args} 1 {'-' if logged else state_field}")

    def scoped(self, scope: str) -> Quota:
        """This quota with one budget per ``scope`` (a user inside the tenant)."""
        return replace(self, scope=scope)

    @property
    def policy(self) -> str:
        """This quota as an IETF ``RateLimit-Policy`` item: ``"tenant";q=1000;w=20``."""
        if self.algorithm in _BUCKETS:
            window = self.maximum / float(self.refill_per_second or 1)
        else:
            window = float(self.window_seconds or 0)
        return f'"{self.name}";q={_compact(self.maximum)};w={max(1, math.ceil(window))}'


#: The most shards a shared quota may have (``[global] shards``).
MAX_SHARDS = 64


def _check_shards(where: str, shards: object, shard: object, *, shared: bool) -> None:
    if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= MAX_SHARDS:
        raise ConfigError(
            f"{where}: shards must be an integer from 1 to {MAX_SHARDS}, got {shards!r}"
        )
    if shards > 1 and not shared:
        raise ConfigError(f"{where}: shards needs a shared quota (a tenant's is one bucket)")
    if shard is not None and (
        isinstance(shard, bool) or not isinstance(shard, int) or not 0 <= shard < shards
    ):
        raise ConfigError(
            f"{where}: shard must be None or an integer from 0 to {shards - 1}, got {shard!r}"
        )


def _scope_token(scope: str) -> str:
    """A scope as part of a storage key: ``s:<scope>`` if short and plain, else its hash
    (``h:``), so that a plain scope never spells another's hash."""
    if len(scope) <= 64 and _NAME.fullmatch(scope):
        return f"s:{scope}"
    digest = hashlib.sha256(scope.encode("utf-8", "surrogatepass")).digest()[:16]
    return "h:" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _positive(where: str, name: str, value: object) -> float:
    if value is None:
        raise ConfigError(f"{where}: {name} is required")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{where}: {name} must be a finite number, got {value!r}")
    if value <= 0:
        raise ConfigError(f"{where}: {name} must be greater than 0, got {value!r}")
    return float(value)


def _compact(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(value)


# Decisions are made on every request: NamedTuples cost a fraction of what frozen
# dataclasses cost to build, and are just as immutable.
class QuotaStatus(NamedTuple):
    """One quota's state after a decision."""

    name: str
    limit: float
    remaining: float
    reset_after: float
    retry_after: float | None
    allowed: bool


class Decision(NamedTuple):
    """The limiter's answer for one request.

    Attributes:
        allowed: the request may run; its cost has been debited from every quota.
        cost: the cost asked for.
        remaining: what is left of the tightest quota (the one that refused, if any).
        limit: that quota's capacity or limit.
        retry_after: seconds until the same request would be allowed; 0 when allowed;
            ``None`` when it never will (``reason == "exceeds_capacity"``).
        reset_after: seconds until that quota is full again.
        limited_by: the name of the quota that refused, or None.
        source: who decided: ``redis``, ``memory``, ``fallback`` (the local storage
            during a Redis outage), ``fail_open`` or ``fail_closed``.
        reason: why it was refused: ``rate_limited``, ``exceeds_capacity`` (the cost
            is larger than the quota can ever allow), ``backend_unavailable``.
        quotas: every quota's status, in the order asked.
        at: the storage's clock (ms) when it decided; None when no storage did (fail open
            or closed). A refund of this decision's debit carries it, so that a window
            algorithm gives back only to the window the debit was counted in.
        delay: seconds the request must wait before it runs (0: now). Above 0 only for an
            allowed decision of quotas with ``max_delay``: its cost is reserved, and it runs
            at its turn.
    """

    allowed: bool
    cost: float
    remaining: float
    limit: float
    retry_after: float | None
    reset_after: float
    limited_by: str | None
    source: Source
    reason: Reason | None = None
    quotas: tuple[QuotaStatus, ...] = ()
    at: int | None = None
    delay: float = 0.0


# tuple.__new__ builds a NamedTuple without its Python-level __new__: a third of the time.
_new = tuple.__new__

# What combine() reads of each quota's check: a Check, or a tuple in its layout (allowed,
# exceeds capacity, state, remaining, retry after ms, reset after ms, ttl ms).
CheckFields = tuple[bool, bool, object, float, float, float, int]


def combine(
    quotas: Sequence[Quota],
    checks: Sequence[CheckFields],
    cost: float,
    source: Source,
    costs: Sequence[float] | None = None,
    at: int | None = None,
) -> Decision:
    """One decision from each quota's check: allowed only if every quota allows.

    When several refuse, the one that names the decision is the first whose cost can never
    fit, else the one with the longest wait; when all allow, the one with least remaining.
    With ``costs`` (what each quota was asked for), a refusal reports the cost asked of
    the quota that refused. ``at`` is the storage's time of the decision (ms). An allowed
    check's retry is its reservation's wait (quotas with ``max_delay``): the decision waits
    the longest.
    """
    if len(checks) == 1 and costs is None:
        allowed, exceeds, _, remaining, retry_ms, reset_ms, _ = checks[0]
        return decide_one(
            quotas[0], allowed, exceeds, remaining, retry_ms, reset_ms, cost, source, at
        )
    if not checks:  # no quota at all: nothing limits
        return _new(
            Decision,
            (True, cost, math.inf, math.inf, 0.0, 0.0, None, source, None, (), at, 0.0),
        )
    statuses: list[QuotaStatus] = []
    chosen = 0  # the quota that names the decision
    refused = never = False
    longest = -1.0
    wait = 0.0  # the longest reservation's wait, ms
    for index, (quota, check) in enumerate(zip(quotas, checks, strict=True)):
        allowed, exceeds, _, remaining, retry_ms, reset_ms, _ = check
        if remaining < 0.0:  # noqa: PLR1730  (max() is a call: hot path)
            remaining = 0.0
        retry = None if exceeds else 0.0 if allowed else retry_ms / 1000
        reset = reset_ms / 1000
        status = (quota.name, quota.maximum, remaining, reset, retry, allowed)
        statuses.append(_new(QuotaStatus, status))
        if allowed:
            if retry_ms > wait:  # noqa: PLR1730  (max() is a call: hot path)
                wait = retry_ms
            if not refused and remaining < statuses[chosen].remaining:
                chosen = index
        elif exceeds:
            if not never:
                chosen, refused, never = index, True, True
        elif not never and retry_ms > longest:
            chosen, refused, longest = index, True, retry_ms
    named = statuses[chosen]
    if not refused:
        return _new(
            Decision,
            (True, cost, named.remaining, named.limit, 0.0, named.reset_after, None, source,
             None, tuple(statuses), at, wait / 1000),
        )  # fmt: skip
    if costs is not None:
        cost = costs[chosen]
    return _new(
        Decision,
        (False, cost, named.remaining, named.limit, named.retry_after, named.reset_after,
         named.name, source, "exceeds_capacity" if never else "rate_limited", tuple(statuses),
         at, 0.0),
    )  # fmt: skip


def decide_one(
    quota: Quota,
    allowed: bool,
    exceeds: bool,
    remaining: float,
    retry_ms: float,
    reset_ms: float,
    cost: float,
    source: Source,
    at: int | None = None,
) -> Decision:
    """:func:`combine` for the common case of one quota, from its check's fields.

    Storages call it with their answer's fields (a memory check, a Redis reply), so no
    intermediate :class:`~quotaql.policy.algorithms.Check` is built for them.
    """
    if remaining < 0.0:  # noqa: PLR1730  (max() is a call: hot path)
        remaining = 0.0
    reset = reset_ms / 1000
    limit = quota.maximum
    if allowed:  # retry_ms: a reservation's wait (0: now)
        status = _new(QuotaStatus, (quota.name, limit, remaining, reset, 0.0, True))
        return _new(
            Decision,
            (True, cost, remaining, limit, 0.0, reset, None, source, None, (status,), at,
             retry_ms / 1000),
        )  # fmt: skip
    retry = None if exceeds else retry_ms / 1000
    status = _new(QuotaStatus, (quota.name, limit, remaining, reset, retry, False))
    reason: Reason = "exceeds_capacity" if exceeds else "rate_limited"
    return _new(
        Decision,
        (False, cost, remaining, limit, retry, reset, quota.name, source, reason, (status,), at,
         0.0),
    )  # fmt: skip
