"""The request gate: the whole story of one GraphQL operation, for any server.

**identify → price → debit → run or refuse → settle → answer → observe.** A
:class:`Gate` is configured once (the config, the limiter and its storage, the identity
hooks, the instruments) and an adapter calls it for each operation:

.. code-block:: python

    op = gate.admit(schema, document, variables, operation_name, context=context)
    if op.runs:
        result = execute(...)                 # run it
        gate.settle(op, result.data)          # refund what it did not use
    else:                                     # refused, or only priced (GraphQL-Cost: validate)
        result = ExecutionResult(None, op.errors)
    answer(result, extensions=gate.results(op), status=op.status, headers=op.headers)
    gate.finish(op)                           # metrics and the span

Each step that talks to the storage (admit, settle, and the charge of a subscription's
events) is written once, as a flow that yields the limiter calls it needs; ``admit`` runs
it with plain calls, ``admit_async`` awaits them (``AsyncRedisStorage``). Nothing here
imports a web framework: the Strawberry extension (``quotaql.plugin``), Ariadne
(``quotaql.ariadne``) and a plain graphql-core server are thin adapters over it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import inspect
import logging
import math
import os
import random
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Self

from graphql import DocumentNode, GraphQLError, validate

from quotaql import web
from quotaql.adaptive import Adaptive, unexpected_error
from quotaql.config import Config, TierConfig, default_config, load_config
from quotaql.contract import (
    IN_FLIGHT,
    IN_FLIGHT_SUBSCRIPTIONS,
    RATE_LIMITED,
    RATE_LIMITER_UNAVAILABLE,
    TOO_MANY_CONCURRENT,
    TOO_MANY_SUBSCRIPTIONS,
    UNKNOWN_API_KEY,
    QuotaqlGraphQLError,
    cost_extension,
    error_code,
    graphql_error,
    rate_limit_error,
    rate_limit_headers,
    status_for,
    too_many_concurrent_error,
    too_many_subscriptions_error,
    unknown_key_error,
)
from quotaql.cost_analysis import analyze, check_model
from quotaql.cost_analysis._compile import graphql_schema
from quotaql.cost_analysis.analyzer import parse_document, select_operation
from quotaql.cost_analysis.screen import screen
from quotaql.errors import (
    ConfigError,
    CostAnalysisError,
    LimitExceeded,
    StorageError,
    StorageTimeout,
)
from quotaql.gate import charges
from quotaql.gate.charges import SUBSCRIPTION_LEASES, TIER_LEASES
from quotaql.identity import Identity, Subject
from quotaql.instrumentation import names
from quotaql.instrumentation.logs import LogRecorder, StructuredLog
from quotaql.instrumentation.tracing import Tracing, hashed_tenant
from quotaql.limiter import AsyncLimiter, CircuitBreaker, Limiter, MultiRecorder
from quotaql.limiter.deny import DenyCache
from quotaql.policy.quota import Decision
from quotaql.storage.leases import (
    AsyncRedisLeases,
    LeaseKeeper,
    LeaseResult,
    LeaseSpec,
    MemoryLeases,
    RedisLeases,
    new_lease_id,
)
from quotaql.storage.memory import MemoryStorage
from quotaql.storage.redis import AsyncRedisStorage, RedisStorage

if TYPE_CHECKING:
    from collections.abc import Collection, Iterator, Mapping, Sequence

    from graphql import ASTValidationRule

    from quotaql.cost_analysis import CostReport
    from quotaql.instrumentation.metrics import PrometheusMetrics
    from quotaql.limiter import Recorder
    from quotaql.policy.quota import Quota
    from quotaql.storage.leases import AsyncLeases, Leases

__all__ = [
    "Adapter",
    "CostHeader",
    "Gate",
    "Operation",
    "TierResolver",
    "current_operation",
    "operation_scope",
]

#: ``tier_resolver(subject, context) -> tier name | None``.
TierResolver = Callable[[Subject, Any], "str | None"]
#: What the ``GraphQL-Cost`` request header asks: price without running, or add a breakdown.
CostHeader = Literal["validate", "report"]

# What the address of a refused unknown key pays for the attempt: a key-guessing client
# runs down its own address's budget, nobody else's.
_REJECTED_KEY_CHARGE = 1.0

# One step a flow asks its driver for: a limiter call, or an awaitable from a hook.
_Step = tuple[Any, ...]
_Flow = Generator[_Step, Any, Any]


class Operation:
    """One operation as the gate worked it out: who pays, the price, the decision, the answer.

    Attributes:
        subject: who pays (:class:`~quotaql.identity.Subject`).
        tier: the subject's tier.
        mode: ``enforce``, ``shadow`` or ``off`` for this tier.
        header: what the ``GraphQL-Cost`` header asked (``validate``, ``report``), if anything.
        report: the static price (None when the analysis refused the operation).
        quotas: the quotas debited, and ``costs`` what each was debited when they differ.
        decision: the limiter's answer (None when nothing was debited).
        actual: the actual cost once executed.
        sizes: the lists the response held, ``(coordinate, assumed, returned, sliced)``,
            when this operation was sampled for tuning (``[cost] tuning_sample``).
        refunded: what was given back after execution.
        error: the refusal to answer instead of running the operation.
        violation: the code of a static limit shadow mode let pass.
        events: subscription events delivered so far.
        charge: what was debited (the cost, or ``[limits] min_charge`` when more).
        denied: refused from the deny cache, before parsing or before the storage.
        failed: refused before it was priced (it did not parse, validate or pass the
            static pass): it pays ``min_charge`` only.
        multiplier: what adaptive limits divided this operation's debit by (1: nothing).
        base: when ``multiplier`` is below 1, what each quota would have been debited
            without it (``costs`` holds what was): its refund is scaled by the same factor.
        started: the adaptive clock's time the operation was admitted (its latency sample).
        lease: the concurrency lease it holds while it runs (tiers with ``max_in_flight``;
            None otherwise), released when it ends.
        waits: how it may wait for its turn (tiers with ``on_limit = "delay"``): ``True``
            while it holds one of the process's ``max_delayed`` places, else why it may
            not (``names.DELAY_PROCESS_FULL``, ``names.DELAY_SYNC``); None for a tier
            that refuses, and for an operation that never waits (a subscription).
    """

    __slots__ = (
        "__weakref__",
        "actual",
        "base",
        "breakdown",
        "charge",
        "costs",
        "decision",
        "denied",
        "document",
        "error",
        "events",
        "failed",
        "finished",
        "header",
        "lease",
        "mode",
        "more",
        "multiplier",
        "operation_name",
        "paid_minimum",
        "quotas",
        "refunded",
        "report",
        "schema",
        "screened",
        "sizes",
        "slot",
        "span",
        "started",
        "status",
        "subject",
        "tier",
        "variables",
        "violation",
        "waits",
    )

    def __init__(
        self, subject: Subject, tier: TierConfig, mode: str, header: CostHeader | None
    ) -> None:
        self.subject = subject
        self.tier = tier
        self.mode = mode
        self.header = header
        self.report: CostReport | None = None
        self.quotas: tuple[Quota, ...] = ()
        self.costs: tuple[float, ...] | None = None
        self.decision: Decision | None = None
        self.actual: float | None = None
        self.sizes: list[tuple[str, float, int, bool]] | None = None
        self.refunded = 0.0
        self.breakdown: dict[str, float] | None = None
        self.error: GraphQLError | None = None
        self.more: tuple[GraphQLError, ...] = ()
        self.violation: str | None = None
        self.span: Any = None
        self.events = 0
        self.slot = False  # holds one of the subject's subscription slots
        self.status: int | None = None
        self.schema: Any = None
        self.document: Any = None
        self.variables: Mapping[str, Any] | None = None
        self.operation_name: str | None = None
        self.charge = 0.0
        self.paid_minimum = False  # refused, and charged min_charge for it
        self.denied = False
        self.failed = False
        self.screened = False
        self.finished = False
        self.multiplier = 1.0
        self.base: tuple[float, ...] | None = None
        self.started: float | None = None
        self.lease: _Lease | None = None
        self.waits: bool | str | None = None

    def refuse(self, error: GraphQLError, status: int | None = None, *more: GraphQLError) -> None:
        """Answer ``error`` (and ``more``; with HTTP ``status``, for a limiter's refusal)
        instead of running the operation."""
        self.error = error
        self.status = status
        self.more = more

    @property
    def tenant(self) -> str:
        """The subject's key (``key:acme``, ``ip:203.0.113.9``): whose budgets pay."""
        return self.subject.key

    @property
    def cost(self) -> float:
        """The requested (estimated) cost."""
        return self.report.cost if self.report is not None else 0.0

    @property
    def operation_type(self) -> str | None:
        """``query``, ``mutation`` or ``subscription`` (None: the document has no such
        operation)."""
        if self.report is not None:
            return self.report.operation_type
        return _operation_type(self.document, self.operation_name)

    @property
    def refused(self) -> bool:
        """The operation must not run: answer :attr:`errors` instead."""
        return self.error is not None

    @property
    def runs(self) -> bool:
        """The operation may run: neither refused nor only priced (``GraphQL-Cost:
        validate``). The one test an adapter needs before executing."""
        return self.error is None and self.header != "validate"

    @property
    def unpaid(self) -> bool:
        """Neither priced nor decided (charged, refused or denied): a request an adapter saw
        end without the gate taking anything for it yet."""
        return self.report is None and self.decision is None

    @property
    def validate_only(self) -> bool:
        """``GraphQL-Cost: validate``: priced, not run; it pays ``min_charge`` only."""
        return self.header == "validate" and self.error is None

    @property
    def errors(self) -> list[GraphQLError]:
        """The GraphQL errors to answer with (empty when the operation runs)."""
        return [] if self.error is None else [self.error, *self.more]

    @property
    def debited(self) -> bool:
        """The cost was taken from the budget (a fail-open decision takes nothing)."""
        decision = self.decision
        return decision is not None and decision.allowed and decision.source != "fail_open"

    @property
    def code(self) -> str | None:
        """The ``extensions.code`` of the refusal, if any."""
        if self.error is None or not self.error.extensions:
            return None
        code = self.error.extensions.get("code")
        return code if isinstance(code, str) else None

    @property
    def outcome(self) -> str:
        """The ``decision`` label of this operation's metrics (``names.DECISIONS``)."""
        decision = self.decision
        code = self.code
        if code is not None:
            if code == UNKNOWN_API_KEY:
                return names.UNKNOWN_KEY
            if code == TOO_MANY_SUBSCRIPTIONS:
                return names.TOO_MANY_SUBSCRIPTIONS
            if code == TOO_MANY_CONCURRENT:
                return names.TOO_MANY_CONCURRENT
        if self.denied:
            return names.DENIED
        if decision is not None and not decision.allowed:
            if decision.source == "fail_closed":
                return names.FAIL_CLOSED
            return names.BLOCKED if self.mode == "enforce" else names.SHADOW_BLOCKED
        if self.failed or (self.report is None and self.error is not None):
            return names.REJECTED  # did not parse, validate or pass the static limits
        if decision is not None and decision.source == "fail_open":
            return names.FAIL_OPEN
        if self.header == "validate":
            return names.VALIDATED
        return names.SHADOW_BLOCKED if self.violation else names.ALLOWED

    @property
    def headers(self) -> dict[str, str]:
        """``RateLimit``, ``RateLimit-Policy``, ``X-RateLimit-*`` and ``Retry-After``."""
        decision = self.decision
        if decision is None:  # nothing debited, or refused before (TOO_MANY_CONCURRENT)
            retry = _concurrency_wait(self)
            return {} if retry is None else {"Retry-After": str(max(1, math.ceil(retry)))}
        if not decision.allowed and self.error is None:
            return {}  # a shadow refusal: no refusal headers
        return rate_limit_headers(decision, self.quotas)


_current: contextvars.ContextVar[Operation | None] = contextvars.ContextVar(
    "quotaql_operation", default=None
)


def current_operation() -> Operation | None:
    """The operation the gate is working on (for resolvers such as ``rateLimit``)."""
    return _current.get()


@contextlib.contextmanager
def operation_scope() -> Iterator[None]:
    """Where one operation runs: :func:`current_operation` starts empty inside and is
    what it was again after (an adapter wraps each operation in it)."""
    token = _current.set(None)
    try:
        yield
    finally:
        _current.reset(token)


class _Reloader:
    """Reads the config file again when it changes, at most once per ``interval`` seconds.

    A change is applied only once the file has stayed the same (size and modification
    time) across two polls, and only if it is valid and still declares the tiers the
    configuration in force declares: an editor's half-written file (cut before
    ``[tiers]``, every tenant on the defaults; cut before ``[tenants]``, tenants demoted)
    is never applied. Write the file by atomic rename (``mv new.toml quotaql.toml``): the
    first poll that sees the change sees the whole file, and the next one applies it.
    """

    def __init__(
        self,
        path: str,
        interval: float,
        log: StructuredLog,
        check: Callable[[Config], None] | None = None,
    ) -> None:
        self.log = log
        self.check = check  # what else a new file must pass (the gate's own arguments)
        self.path = path
        self.interval = interval
        self._seen = self._stamp()
        self._pending: tuple[int, int, int] | None = None  # changed, not yet seen twice
        self._next = time.monotonic() + interval
        self._lock = threading.Lock()

    def _stamp(self) -> tuple[int, int, int] | None:
        try:
            stat = os.stat(self.path)
        except OSError:
            return None
        return stat.st_mtime_ns, stat.st_size, stat.st_ino

    def poll(self, schema: Any, current: Config) -> Config | None:
        """A new valid config if the file changed and has stayed so since the last look."""
        if self.interval <= 0 or time.monotonic() < self._next:
            return None
        if not self._lock.acquire(blocking=False):
            return None  # another thread is looking
        try:
            self._next = time.monotonic() + self.interval
            stamp = self._stamp()
            if stamp is None or stamp == self._seen:
                self._pending = None
                return None
            if stamp != self._pending:  # changed since the last look: maybe mid-write
                self._pending = stamp
                return None
            self._seen, self._pending = stamp, None
            return self._load(schema, current)
        finally:
            self._lock.release()

    def _load(self, schema: Any, current: Config) -> Config | None:
        try:
            config = load_config(self.path)
            _check(config, schema)
            if self.check is not None:
                self.check(config)
            if current.declares_tiers and not config.declares_tiers:
                raise ConfigError(
                    "the new file declares no [tiers] (cut short while being written?);"
                    " every tenant would fall back to the default tier",
                    file=self.path,
                )
        except ConfigError as error:
            self.log.log(
                logging.ERROR,
                "config_reload_failed",
                "quotaql: %s; keeping the previous configuration",
                error,
                file=self.path,
            )
            return None
        self.log.log(
            logging.INFO,
            "config_reloaded",
            "quotaql: configuration reloaded from %s",
            self.path,
            file=self.path,
        )
        self.interval = config.limits.reload_interval
        return config


class _Slots:
    """Places per key, in this process: open subscriptions per subject (``[limits]
    max_subscriptions``), operations waiting for their turn (``[limits] max_delayed``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, int] = {}
        self._total = 0

    def take(self, key: str, limit: int | None) -> bool:
        with self._lock:
            count = self._open.get(key, 0)
            if limit is not None and count >= limit:
                return False
            self._open[key] = count + 1
            self._total += 1
            return True

    def give_back(self, key: str) -> None:
        with self._lock:
            count = self._open.get(key, 0)
            if count == 0:
                return
            if count > 1:
                self._open[key] = count - 1
            else:
                del self._open[key]
            self._total -= 1

    def total(self) -> int:
        return self._total  # one int: read without the lock


class _Reply(NamedTuple):
    """What one operation answers for the HTTP response it shares with a batch."""

    status: int | None  # a limiter's refusal, else None
    ran: bool  # not refused (by the limiter or by the analysis)
    code: str | None
    headers: dict[str, str]
    remaining: float  # of the quota the headers describe (inf: no decision)
    wait: float  # seconds until a refusal would pass


def _reply(op: Operation) -> _Reply:
    decision = op.decision
    headers = op.headers
    ran = op.error is None
    if decision is None or not headers:
        wait = _concurrency_wait(op) if decision is None else None
        return _Reply(op.status, ran, op.code, headers, math.inf, wait or 0.0)
    wait = decision.retry_after or 0.0
    return _Reply(op.status, ran, op.code, headers, decision.remaining, wait)


#: The refusals a client gets past by waiting (their Retry-After answers a batch).
_WAITING_HELPS = frozenset({RATE_LIMITED, TOO_MANY_CONCURRENT})


def _concurrency_wait(op: Operation) -> float | None:
    """The ``retryAfter`` of ``op``'s ``TOO_MANY_CONCURRENT`` refusal (None: not one)."""
    error = op.error
    if error is None or not error.extensions:
        return None
    extensions = error.extensions
    if extensions.get("code") != TOO_MANY_CONCURRENT:
        return None
    retry = extensions.get("retryAfter")
    return float(retry) if isinstance(retry, int | float) else None


class _Lease(NamedTuple):
    """A concurrency lease one operation holds while it runs.

    ``leases`` is where it was taken (the gate's lease storage, or the process-local one
    of the ``local`` fail mode), None when it holds none there (``open`` and ``closed``
    after the storage failed); ``stray`` is the storage whose take failed: the lease may
    have been taken there anyway (a call that timed out may still run), so it is released
    there too, when the operation ends.
    """

    id: str
    key: str
    names: tuple[str, ...]
    leases: Any
    keeper: LeaseKeeper | None
    tier: str
    in_flight: int
    stray: Any = None


class _Taken(NamedTuple):
    """What a take step answered: the storage's result (None: the storage failed and the
    fail mode takes none), the storage it was taken in, the specs asked of it."""

    result: LeaseResult | None
    leases: Any
    specs: tuple[LeaseSpec, ...]
    stray: Any  # the storage that failed, else None


# The lease storage failed or its breaker is open: no answer from it.
_UNAVAILABLE: Any = object()


class _Leasing:
    """The gate's concurrency-lease state (one attribute of the gate: see ``Gate.__init__``)."""

    __slots__ = (
        "abandoned", "fail_mode", "fallback_leases", "finalizers", "in_flight", "keepers",
        "lease_backend", "lease_lock", "leases", "leases_async", "leases_fallible",
        "local_share", "local_spec_cache", "releasing",
    )  # fmt: skip

    def __init__(self, limits: Any) -> None:
        # The fail mode and the local share are the limiter's, read once as it reads them.
        self.fail_mode: str = limits.on_backend_error
        self.local_share: float = limits.local_share
        self.leases: Any = None  # the lease storage, once a tier has a concurrency limit
        self.leases_async = False
        self.leases_fallible = False
        self.lease_backend = "memory"
        self.lease_lock = threading.Lock()
        self.keepers: dict[tuple[int, int], LeaseKeeper] = {}  # (id(leases), ttl ms)
        self.fallback_leases: MemoryLeases | None = None  # the local fail mode's
        self.local_spec_cache: dict[LeaseSpec, LeaseSpec] = {}
        self.in_flight: dict[str, int] = {}  # leases held, per tier
        self.releasing: set[asyncio.Task[None]] = set()  # releases under way
        self.finalizers: dict[int, weakref.finalize[Any, Any]] = {}  # by id(operation)
        self.abandoned: collections.deque[_Lease] = collections.deque()


class _Responses:
    """The operations that share one HTTP response (a batch), so that its status and headers
    say what all of them did: 200 when any ran, a refusal only when every one was refused.

    Kept by weak reference to the response (gone with it); a response that takes no weak
    references (Litestar's) is kept, with its replies, among the last ``_STRONG`` such
    responses, which bounds the memory and keeps its ``id`` from being reused meanwhile.
    """

    _STRONG = 256

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._weak: weakref.WeakKeyDictionary[Any, list[_Reply]] = weakref.WeakKeyDictionary()
        self._strong: OrderedDict[int, tuple[Any, list[_Reply]]] = OrderedDict()

    def add(self, response: Any, reply: _Reply) -> list[_Reply]:
        with self._lock:
            try:
                replies = self._weak.setdefault(response, [])
            except TypeError:
                entry = self._strong.get(id(response))
                if entry is None or entry[0] is not response:
                    entry = self._strong[id(response)] = (response, [])
                    if len(self._strong) > self._STRONG:
                        self._strong.popitem(last=False)
                replies = entry[1]
            replies.append(reply)
            return list(replies)


def _answer(replies: Sequence[_Reply]) -> tuple[int | None, dict[str, str]]:
    """The status and headers of a response that the operations of ``replies`` share."""
    if len(replies) == 1:
        return replies[0].status, replies[0].headers
    refused = [reply for reply in replies if not reply.ran]
    tightest = min(replies, key=lambda reply: (reply.remaining, -reply.wait))
    if len(refused) < len(replies):  # something ran: the response is a success
        status = 200 if any(reply.status is not None for reply in refused) else None
        headers = {k: v for k, v in tightest.headers.items() if k != "Retry-After"}
        return status, headers
    limited = [reply for reply in refused if reply.code in _WAITING_HELPS]
    if limited:  # waiting helps: answer the longest wait of them
        longest = max(limited, key=lambda reply: reply.wait)
        return longest.status, longest.headers
    status = next((reply.status for reply in refused if reply.status is not None), None)
    return status, tightest.headers


class Gate:
    """Prices, debits, refuses and refunds GraphQL operations: the core every adapter uses.

    Example:
        >>> from graphql import build_schema, parse
        >>> schema = build_schema("type Query { hello: String }")
        >>> gate = Gate()
        >>> request = {"type": "http", "client": ("203.0.113.9", 5123), "headers": []}
        >>> op = gate.admit(schema, parse("{ hello }"), request=request)
        >>> op.subject.key, op.refused, op.headers["RateLimit-Policy"]
        ('ip:203.0.113.9', False, '"tenant";q=1000;w=20')

    Args:
        config: the configuration (default: :func:`quotaql.config.default_config`).
        storage: where budgets live: a :class:`MemoryStorage` (default), a
            :class:`~quotaql.storage.redis.RedisStorage`, or an
            :class:`~quotaql.storage.redis.AsyncRedisStorage` (then only the ``*_async``
            entry points work).
        identify: ``identify(context) -> str | None``: the subject, in its own ``id:``
            namespace; None goes on with the default identification.
        key_resolver: ``key_resolver(key, context) -> tenant | None``: accepts API keys
            (a database lookup; with a resolver, ``[tenants]`` names tenants, not keys).
        principal: ``principal(context) -> user id | None``: the authenticated user
            (default: Django's ``request.user``).
        tier_resolver: ``tier_resolver(subject, context) -> str | None``: the subject's
            tier name, instead of the ``[tenants]`` table (None: the default tier).
        metrics: Prometheus metrics of every operation and decision.
        tracer_provider: an OpenTelemetry ``TracerProvider``: a ``quotaql.check`` span per
            operation (none at all without one).
        log: the rate-limited structured log (default: 5 records/s per event kind).
        recorder: another hook for the limiter's decisions, errors and breaker changes.
        breaker: the circuit breaker in front of the storage.
        config_path: the file ``config`` came from, read again when it changes.
        pressure: ``pressure() -> float`` in [0, 1], the ``callable`` source of adaptive
            limits (``[adaptive] sources``): read at most once a second, on the request
            path, so it must return at once (a value computed elsewhere); NaN or an
            exception counts as 0 ([adaptive limits](docs/adaptive.md)).
        leases: where the concurrency leases of ``max_in_flight`` live (default: the lease
            storage of ``storage``: :class:`~quotaql.storage.leases.MemoryLeases` for a
            memory storage, :class:`~quotaql.storage.leases.RedisLeases` or
            :class:`~quotaql.storage.leases.AsyncRedisLeases` on a Redis storage's client;
            docs/concurrency.md).

    Attributes:
        adaptive: the adaptive limits' controller (:class:`quotaql.adaptive.Adaptive`:
            pressure, multiplier, engaged), None while ``[adaptive] mode`` is ``off``.
    """

    def __init__(
        self,
        config: Config | None = None,
        *,
        storage: Any = None,
        identify: Callable[[Any], Any] | None = None,
        key_resolver: Callable[[str, Any], Any] | None = None,
        principal: Callable[[Any], Any] | None = None,
        tier_resolver: TierResolver | None = None,
        metrics: PrometheusMetrics | None = None,
        tracer_provider: Any = None,
        log: StructuredLog | None = None,
        recorder: Recorder | None = None,
        breaker: CircuitBreaker | None = None,
        config_path: str | os.PathLike[str] | None = None,
        pressure: Callable[[], float] | None = None,
        leases: Leases | AsyncLeases | None = None,
    ) -> None:
        self._config = config if config is not None else default_config()
        if pressure is not None and not callable(pressure):
            raise TypeError(f"pressure must be a callable, got {type(pressure).__name__}")
        self._pressure = pressure
        self._check_pressure(self._config)
        self.storage = storage if storage is not None else MemoryStorage()
        self.tier_resolver = tier_resolver
        self.is_async = inspect.iscoroutinefunction(getattr(self.storage, "acquire", None))
        self.metrics = metrics
        self.tracing = Tracing(tracer_provider) if tracer_provider is not None else None
        self.log = log if log is not None else StructuredLog()
        self.identity = Identity(
            identify=identify, key_resolver=key_resolver, principal=principal, log=self.log
        )
        hooks = [hook for hook in (metrics, recorder) if hook is not None]
        logs = LogRecorder(self.log)
        self._recorder: Recorder = MultiRecorder(logs, *hooks) if hooks else logs
        limiter_class = AsyncLimiter if self.is_async else Limiter
        self.limiter: Limiter | AsyncLimiter = limiter_class(
            self.storage,
            on_backend_error=self._config.limits.on_backend_error,
            local_share=self._config.limits.local_share,
            open_cap=self._config.limits.open_cap,
            breaker=breaker,
            recorder=self._recorder,
        )
        if metrics is not None:
            queue = self.limiter.refund_queue
            if queue is not None:
                metrics.watch_refunds(queue)
            if isinstance(self.storage, AsyncRedisStorage):
                metrics.watch_pipeline(self.storage)
        # Concurrency leases (tiers with max_in_flight): their state in one object, so that
        # the gate keeps few attributes (CPython's shared-key instance dicts, and the fast
        # attribute reads of every request, stop past 30).
        self._leasing = _Leasing(self._config.limits)
        if leases is not None:
            self._set_leases(leases)
        self._reloader = (
            _Reloader(
                os.fspath(config_path),
                self._config.limits.reload_interval,
                self.log,
                self._check_pressure,
            )
            if config_path is not None
            else None
        )
        self._checked_schema: Any = None
        self._slots = _Slots()
        self._waiting = _Slots()  # operations waiting for their turn (one key)
        self._denials = DenyCache(self._config.limits.deny_cache_size)
        self._responses = _Responses()
        self._said: set[str] = set()  # what has been logged once
        self.adaptive: Adaptive | None = None
        self._configured(self._config)

    @classmethod
    def from_config(cls, path: str | os.PathLike[str], **kwargs: Any) -> Gate:
        """A gate configured by ``path`` (``quotaql.toml``), reloaded when it changes.

        Raises:
            ConfigError: the file is invalid (the error names the file, key and line).
        """
        return cls(load_config(path), config_path=path, **kwargs)

    @property
    def config(self) -> Config:
        """The configuration in force."""
        return self._config

    def check(self, schema: Any) -> None:
        """Check the cost model and the root-field quotas against ``schema`` (at startup).

        Raises:
            ConfigError: a weight or a ``[tiers.<t>.fields]`` quota names a coordinate that
                is not in the schema.
        """
        _check(self._config, schema)
        self._checked_schema = schema

    def parse(
        self,
        schema: Any,
        query: object,
        rules: Collection[type[ASTValidationRule]] | None = None,
        *,
        op: Operation | None = None,
    ) -> DocumentNode | list[GraphQLError]:
        """``query`` parsed within the ``[cost]`` parser limits, its shape checked (the
        static pass: :meth:`screen`), then validated (graphql-core's rules, or ``rules``):
        the document to admit, or the errors to answer with.

        For servers that parse themselves (plain graphql-core, Graphene). Give the
        operation :meth:`begin` made: a subject refused a moment ago is answered its
        refusal without parsing anything, and a shadow-mode tier's document is not refused
        by the static pass. The errors: ``GRAPHQL_PARSE_FAILED``, ``QUERY_TOO_LARGE``
        (``max_tokens``, ``max_length``), ``QUERY_TOO_DEEP``, ``TOO_MANY_ALIASES``,
        ``TOO_MANY_FIELDS``, ``TOO_MANY_DIRECTIVES``, ``TOO_MANY_ROOT_FIELDS``, and
        graphql-core's validation errors. :meth:`admit` charges ``[limits] min_charge``
        for them.
        """
        if op is not None and op.error is not None:
            return op.errors  # denied before parsing
        if not isinstance(query, str):
            return [QuotaqlGraphQLError("Send the query as a string.",
                                        extensions={"code": "GRAPHQL_PARSE_FAILED"})]  # fmt: skip
        try:
            document = self.parse_document(query)
        except GraphQLError as error:
            return [error]
        refusal = self.screen(op, document)
        if refusal is not None:
            return [refusal]
        errors = validate(graphql_schema(schema), document, rules)
        return errors or document

    def screen(self, op: Operation | None, document: DocumentNode) -> GraphQLError | None:
        """The static pass: ``document``'s shape against the ``[cost]`` limits (depth,
        aliases, root fields, fields, repeated fields, directives), before validation.

        Cheap and bounded (it stops at the first limit crossed), so that a hostile
        document is refused before graphql-core's validation, whose overlapping-fields rule
        is quadratic. A shadow-mode ``op`` is not refused: the violation is logged and
        counted. Returns the refusal to answer, or None.
        """
        limits = self._config.cost.limits
        if op is not None:
            op.screened = True
        if not limits.screens:
            return None
        try:
            screen(document, limits)
        except LimitExceeded as exceeded:
            if op is not None and op.mode != "enforce":
                if op.mode == "shadow":
                    op.violation = exceeded.code
                    self._log(op, names.SHADOW_BLOCKED, _SHADOW_MESSAGE, exceeded.code)
                return None
            error = graphql_error(exceeded)
            if op is not None:
                self._failed(op, [error])
            return error
        return None

    def parse_document(self, query: str) -> DocumentNode:
        """``query`` parsed within the ``[cost]`` parser limits, for an adapter's parse hook.

        Raises:
            GraphQLError: the error to answer (``GRAPHQL_PARSE_FAILED``, ``QUERY_TOO_LARGE``,
                ``QUERY_TOO_DEEP``), raised by quotaql (``QuotaqlGraphQLError``).
        """
        try:
            return parse_document(query, self._config.cost.limits)
        except CostAnalysisError as error:
            raise graphql_error(error) from None

    def open_subscriptions(self) -> int:
        """How many subscriptions this process holds open (the gauge's value)."""
        return self._slots.total()

    # -- the entry points ------------------------------------------------------------------

    def begin(self, *, context: Any = None, request: Any = None) -> Operation:
        """Identify who pays for the request about to be parsed, and refuse it at once if
        the storage refused that subject a moment ago (the deny cache): then
        :attr:`Operation.refused` holds, and nothing needs parsing.

        Hand the operation to :meth:`parse` and :meth:`admit` (``op=``).
        """
        op: Operation = self._drive(self._begin(context, request, False), storage=False)
        return op

    async def begin_async(self, *, context: Any = None, request: Any = None) -> Operation:
        """:meth:`begin` on an event loop (async identity hooks are awaited)."""
        op: Operation = await self._drive_async(self._begin(context, request, True))
        return op

    def fail(self, op: Operation, errors: Sequence[GraphQLError]) -> None:
        """Record that ``op``'s document was refused before pricing (``errors``), without a
        storage call: :meth:`reject` (or :meth:`admit`) charges for it later, once. For a
        parse hook that cannot await."""
        if op.error is None:
            self._failed(op, errors)

    def reject(self, op: Operation, errors: Sequence[GraphQLError]) -> None:
        """``op``'s document was refused before it could be priced (it did not parse or
        validate: ``errors``): answer them, and charge ``[limits] min_charge``."""
        self._drive(self._reject(op, errors))

    async def reject_async(self, op: Operation, errors: Sequence[GraphQLError]) -> None:
        """:meth:`reject` on an event loop."""
        await self._drive_async(self._reject(op, errors))

    def admit(
        self,
        schema: Any,
        document: Any,
        variables: Mapping[str, Any] | None = None,
        operation_name: str | None = None,
        *,
        context: Any = None,
        request: Any = None,
        op: Operation | None = None,
    ) -> Operation:
        """Identify, price and debit one operation; its :attr:`Operation.error` says if it
        must not run.

        Every request pays at least ``[limits] min_charge``: one that does not parse or
        validate, or that the static limits refuse, pays that much and no more; a request
        refused for lack of budget pays nothing.

        Args:
            schema: a ``graphql.GraphQLSchema``, a ``strawberry.Schema`` or a Graphene one.
            document: the parsed ``DocumentNode`` (or the query text), or what
                :meth:`parse` answered: its errors are then the operation's, and nothing is
                priced or debited.
            variables: the request's raw JSON variables.
            operation_name: which operation of the document runs.
            context: the GraphQL context, passed to the hooks (``identify``, ...).
            request: the web framework's request (default: ``context["request"]``).
            op: what :meth:`begin` made of the request (then ``context`` and ``request``
                are not looked at again).

        Raises:
            TypeError: the storage is async: use :meth:`admit_async`.
        """
        flow = self._admit(schema, document, variables, operation_name, context, request, False,
                           op)  # fmt: skip
        admitted: Operation = self._drive(flow)
        return admitted

    async def admit_async(
        self,
        schema: Any,
        document: Any,
        variables: Mapping[str, Any] | None = None,
        operation_name: str | None = None,
        *,
        context: Any = None,
        request: Any = None,
        op: Operation | None = None,
    ) -> Operation:
        """:meth:`admit` on an event loop: storage calls and async hooks are awaited."""
        flow = self._admit(schema, document, variables, operation_name, context, request, True,
                           op)  # fmt: skip
        admitted: Operation = await self._drive_async(flow)
        return admitted

    def settle(
        self, op: Operation, data: Any, errors: Sequence[GraphQLError] | None = None
    ) -> None:
        """After execution: count the actual cost from ``data`` and refund what was unused.

        ``errors`` are the result's errors: what an error erased from ``data`` (a field
        nulled, up to the nearest nullable parent, or all of ``data``) is charged at its
        estimate, since its resolvers ran.
        """
        self._drive(self._settle(op, data, errors))

    async def settle_async(
        self, op: Operation, data: Any, errors: Sequence[GraphQLError] | None = None
    ) -> None:
        """:meth:`settle` on an event loop."""
        await self._drive_async(self._settle(op, data, errors))

    def event(self, op: Operation) -> GraphQLError | None:
        """Charge a subscription event about to be delivered; an error ends the subscription.

        The first event is paid by the debit at the start; each later one costs the
        subscription's price again. A subject out of budget gets ``RATE_LIMITED`` (with
        ``retryAfter``) instead of the event, and the subscription should end.
        """
        error: GraphQLError | None = self._drive(self._event(op))
        return error

    async def event_async(self, op: Operation) -> GraphQLError | None:
        """:meth:`event` on an event loop."""
        error: GraphQLError | None = await self._drive_async(self._event(op))
        return error

    def respond(self, op: Operation, response: Any) -> None:
        """Write ``op``'s status and rate-limit headers on the framework's ``response``.

        Operations that share one response (a batch) answer together: 200 when any ran
        (each refused one carries its error), a refusal status only when all were
        refused; the headers describe the most restrictive quota. Nothing is written to a
        websocket, or for a subscription.
        """
        if response is None or op.operation_type == "subscription" or web.is_websocket(response):
            return
        replies = self._responses.add(response, _reply(op))
        status, headers = _answer(replies)
        if status is not None:
            web.set_status(response, status)
        web.set_headers(response, headers, remove=("Retry-After",) if len(replies) > 1 else ())

    def results(self, op: Operation | None) -> dict[str, Any]:
        """The response's ``extensions``: ``{"cost": ...}`` (empty when not exposed)."""
        if (
            op is None
            or op.report is None
            or (not self._config.limits.expose_cost and op.header is None)
        ):
            return {}
        restore = _restore_rate(op.quotas[0]) if op.quotas else None
        return {"cost": cost_extension(op.cost, op.actual, op.decision, restore, op.breakdown)}

    def finish(self, op: Operation | None) -> None:
        """Record the operation (metrics, its span) and free its subscription slot; once."""
        if op is None or op.finished:
            return
        op.finished = True
        self._free_slot(op)
        lease = op.lease
        releasing = None if lease is None else self._release(op, end_span=True)
        report, decision = op.report, op.decision
        operation_type = op.operation_type or "unknown"
        outcome = op.outcome
        if self.metrics is not None:
            self.metrics.operation(
                outcome,
                operation_type,
                op.tier.name,
                op.subject.key,
                cost=report.cost if report else None,
                depth=report.depth if report else None,
                actual=op.actual,
                charged=op.charge if op.debited or op.paid_minimum else 0.0,
                refunded=op.refunded,
                identity=op.subject.source,
            )
            if report is not None and op.actual is not None:
                self.metrics.estimate(operation_type, op.tier.name, report.cost, op.actual)
            if op.sizes:
                self.metrics.list_sizes(op.sizes)
        span = op.span
        if span is not None:
            attributes: dict[str, Any] = {
                names.ATTR_OPERATION_TYPE: operation_type,
                names.ATTR_TENANT: hashed_tenant(op.subject.key),
                names.ATTR_IDENTITY: op.subject.source,
                names.ATTR_TIER: op.tier.name,
                names.ATTR_DECISION: outcome,
            }
            if report is not None and report.operation_name:
                attributes[names.ATTR_OPERATION_NAME] = report.operation_name
            if report is not None:
                attributes[names.ATTR_COST_ESTIMATED] = report.cost
                attributes[names.ATTR_COST_MODEL] = report.model
                attributes[names.ATTR_DEPTH] = report.depth
            if op.actual is not None:
                attributes[names.ATTR_COST_ACTUAL] = op.actual
            if op.events:
                attributes[names.ATTR_EVENTS] = op.events
            if op.multiplier < 1.0:
                attributes[names.ATTR_ADAPTIVE_MULTIPLIER] = op.multiplier
            if decision is not None:
                attributes[names.ATTR_REMAINING] = decision.remaining
                attributes[names.ATTR_BACKEND] = decision.source
                if decision.retry_after:
                    attributes[names.ATTR_RETRY_AFTER] = decision.retry_after
            if lease is not None and lease.leases is not None:
                attributes[names.ATTR_IN_FLIGHT] = lease.in_flight
            span.set_attributes(attributes)
            if releasing is None:
                span.end()
            else:  # the release is on its way: the span ends when it is done
                self._spawn(releasing, span)
        elif releasing is not None:
            self._spawn(releasing)

    # -- the flows -------------------------------------------------------------------------

    def _begin(self, context: Any, request: Any, can_await: bool) -> _Flow:
        """Who pays, the tier, what the ``GraphQL-Cost`` header asks, and the deny cache."""
        config = self._config
        if request is None:
            request = web.request_of(context)
        subject: Subject = yield from self.identity.resolve(
            request, context, config.identity, config.tenants, can_await=can_await
        )
        if subject.source == "anonymous":
            self._say_once(
                "no_client_address",
                "quotaql: a request came without an API key, a principal or a client address"
                " (the server reports no peer); such requests share the 'anonymous' budget"
                " (docs/identity.md)",
            )
        tier = self._tier(subject, context)
        header = _cost_header(request)
        op = Operation(subject, tier, tier.mode or config.limits.mode, header)
        if op.mode == "off" and header is None:
            return op
        if self.tracing is not None:
            op.span = self.tracing.start()
        if op.mode == "enforce" and len(self._denials):
            denial = self._denials.before_parsing(_denial_key(subject))
            if denial is not None:  # even the cheapest request would be refused
                minimum = max(config.limits.min_charge, 0.0)
                self._deny(op, denial.decision._replace(cost=minimum), denial.quotas, True)
        return op

    def _admit(
        self,
        schema: Any,
        document: Any,
        variables: Mapping[str, Any] | None,
        operation_name: str | None,
        context: Any,
        request: Any,
        can_await: bool,
        op: Operation | None,
    ) -> _Flow:
        self._refresh(schema)
        config = self._config
        if op is None:
            op = yield from self._begin(context, request, can_await)
        if op.error is not None:  # denied, or refused before pricing (charged once)
            if op.failed:
                yield from self._charge_minimum(op)
            return op
        if isinstance(document, list):  # what parse() refused
            if document:
                yield from self._reject(op, document)
            return op
        header = op.header
        if document is None or (op.mode == "off" and header is None):
            return op
        _current.set(op)
        op.schema, op.document, op.variables = schema, document, variables
        op.operation_name = operation_name
        if header == "validate" and _operation_type(document, operation_name) == "subscription":
            # A subscription always runs (its stream is not a result a header can replace):
            # priced and debited like any other, with the breakdown "validate" asked for.
            op.header = header = "report"
        subject = op.subject
        if subject.rejected and op.mode != "off":
            yield from self._reject_key(op)  # before any pricing: guessing keys is cheap
            if op.refused:
                return op
        if not op.screened and isinstance(document, DocumentNode):
            self.screen(op, document)  # a document the adapter did not screen
        if op.refused or not self._price(op, schema, document, variables,
                                                   operation_name):  # fmt: skip
            yield from self._charge_minimum(op)
            return op
        report = op.report
        assert report is not None  # priced
        if header is not None:
            op.breakdown = report.by_coordinate
        if op.mode == "off":
            return op  # priced, not limited: nothing debited
        if header == "validate":
            yield from self._charge_minimum(op)  # priced, not run: it pays the minimum
            return op
        minimum = config.limits.min_charge
        op.charge = charge = max(report.cost, minimum)
        op.quotas, op.costs = charges.charges_for(
            config, subject, report, op.tier if self.tier_resolver is not None else None,
            charge if charge != report.cost else None,
        )  # fmt: skip
        adaptive = self.adaptive
        if adaptive is not None:
            self._adapt(op, adaptive, config, report.operation_type != "subscription")
        if op.mode == "enforce" and len(self._denials):
            probe = charge if op.base is None else _subject_debit(op)
            denial = self._denials.priced(_denial_key(subject), probe)
            if denial is not None:  # no cheaper than what was refused, before its time
                self._deny(op, denial.decision._replace(cost=charge), op.quotas)
                return op
        subscription = report.operation_type == "subscription"
        if subscription:
            limit = config.limits.max_subscriptions
            if not self._take_slot(op, limit if op.mode == "enforce" else None):
                op.refuse(too_many_subscriptions_error(limit or 0))  # a websocket: no status
                self._log(op, names.TOO_MANY_SUBSCRIPTIONS, "quotaql: refused %s", op.code)
                return op
        if charges.in_flight(op.tier) is not None and not (
            yield from self._lease_first(op, report)
        ):
            return op  # a concurrency limit: the lease first, so that a refusal debits nothing
        if op.tier.delays and not subscription:
            self._may_wait(op, config, can_await)
        try:
            decision: Decision = yield ("acquire", subject.key, charge, op.quotas, op.costs)
            self._decided(op, decision)
            if decision.delay > 0 and op.waits is True:  # allowed, at its turn
                yield from self._wait(op, decision.delay, can_await)
        except BaseException:  # closed by its driver: no operation for the adapter to finish
            self._free_slot(op)
            self._let_go(op)
            raise
        finally:
            self._stop_waiting(op)
        if op.refused:  # refused: the subscription never opens, the lease goes back at once
            self._free_slot(op)
            if op.lease is not None:
                yield ("release", op)
            if decision.reason == "exceeds_capacity" and op.mode == "enforce":
                yield from self._charge_refusal(op)  # it can never run: as a static limit
        return op

    def _may_wait(self, op: Operation, config: Config, can_await: bool) -> None:
        """Whether ``op`` (of a delay tier) may wait for its turn: it takes one of the
        process's ``max_delayed`` places and its quotas their waits, or it is decided as
        if its tier refused (a sync server, or the place is full). In shadow mode it is
        decided with the waits (as enforce would) and runs at once."""
        limits = config.limits
        if not can_await and limits.delay_sync != "sleep":
            op.waits = names.DELAY_SYNC
            return
        if op.mode != "enforce":
            op.waits = False  # decided as enforce would, never waits
        elif self._waiting.take("", limits.max_delayed):
            op.waits = True
        else:
            op.waits = names.DELAY_PROCESS_FULL
            return
        op.quotas = charges.delayed(op.tier, op.quotas)

    def _wait(self, op: Operation, delay: float, can_await: bool) -> _Flow:
        """``op`` waits ``delay`` seconds for its turn (its cost is reserved); its client
        gone before its turn (the flow closed), its whole debit goes back: it never ran."""
        tier = op.tier.name
        if self.metrics is not None:
            self.metrics.delayed(tier, delay)
            self.metrics.delays_waiting(self._waiting.total())
        if op.span is not None:
            op.span.set_attribute(names.ATTR_DELAY, delay)
            op.span.add_event(names.EVENT_DELAYED, {names.ATTR_DELAY: delay})
        self._log(op, names.DELAYED, "quotaql: delayed %.3fs for its turn", delay)
        try:
            if can_await:
                yield ("await", asyncio.sleep(delay))
            else:  # [limits] delay_sync = "sleep": this thread waits
                time.sleep(delay)
        except BaseException:
            self._left_waiting(op)
            raise
        adaptive = self.adaptive
        if op.started is not None and adaptive is not None:
            # Its latency sample starts at its turn: a wait is the limiter's doing, not the
            # service's (counted, it would read as pressure, tighten, and queue more).
            op.started = adaptive.clock()

    def _left_waiting(self, op: Operation) -> None:
        """``op`` was closed while waiting for its turn: give back its whole debit (it never
        ran, so it used none of it) without waiting (a closing flow cannot await)."""
        # Only a storage's decision has a turn to wait for: it goes back where it was made.
        done = self._step(("refund", op.subject.key, op.charge, op.quotas, op.costs, op.decision))
        if inspect.isawaitable(done):
            self._spawn(done)
        op.refunded = op.charge
        if self.metrics is not None:
            self.metrics.delay_cancelled(op.tier.name)
        if op.span is not None:
            op.span.add_event(names.EVENT_DELAY_CANCELLED, {"quotaql.refund": op.charge})
        self._log(op, names.DELAY_CANCELLED, "quotaql: left while waiting, refunded %s",
                  op.charge)  # fmt: skip

    def _stop_waiting(self, op: Operation) -> None:
        """Give back ``op``'s place among the operations waiting (if it holds one)."""
        if op.waits is True:
            op.waits = False
            self._waiting.give_back("")
            if self.metrics is not None:
                self.metrics.delays_waiting(self._waiting.total())

    def _lease_first(self, op: Operation, report: CostReport) -> _Flow:
        """The lease of an operation of a tier with a concurrency limit, before its debit:
        True when it may run; refused, its subscription slot is given back."""
        in_flight = charges.in_flight(op.tier)
        assert in_flight is not None  # the caller looked
        specs = in_flight.specs(report.operation_type, report.root_field_costs)
        if specs is not None and not specs:
            return True  # no limit applies to this one (a root field's only, not selected)
        try:
            runs: bool = yield from self._take_lease(op, specs)
        except BaseException:
            self._free_slot(op)
            raise
        if not runs:
            self._free_slot(op)
        return runs

    def _take_lease(self, op: Operation, specs: tuple[LeaseSpec, ...] | None) -> _Flow:
        """A lease for ``op`` in the sets of ``specs`` (None: a subscription its tier
        allows none of): True when it may run (with a lease, or without one in shadow mode
        or failing open), False when it was refused (``TOO_MANY_CONCURRENT``, or the
        storage failed under ``closed``)."""
        key = op.subject.key
        if specs is None:  # max_subscriptions_in_flight = 0
            return self._in_flight_refused(op, IN_FLIGHT_SUBSCRIPTIONS, 0, None)
        if self._leasing.abandoned:  # operations dropped unfinished: their leases first
            self._release_abandoned()
        lease = new_lease_id()
        try:
            taken: _Taken = yield ("lease", key, specs, lease)
        except BaseException:  # closed while taking: it may have been taken, give it back
            if not self._leasing.leases_async:  # (async: once the take is answered)
                self._release_later(
                    _Lease(lease, key, tuple(spec.name for spec in specs), None, None, "", 0,
                           self._leasing.leases)
                )  # fmt: skip
            raise
        result = taken.result
        names_ = tuple(spec.name for spec in taken.specs)
        if result is None:  # the storage failed: open runs without a lease, closed refuses
            op.lease = _Lease(lease, key, names_, None, None, op.tier.name, 0, taken.stray)
            self._watch(op)
            if self._leasing.fail_mode != "closed" or op.mode != "enforce":
                return True
            # As the limiter's own fail-closed decision: its quotas' sizes, nothing debited.
            retry = max(self.limiter.breaker.retry_after(), 1.0)
            limit = min((quota.maximum for quota in op.quotas), default=math.inf)
            op.decision = Decision(
                False, op.charge, 0.0, limit, retry, 0.0, None, "fail_closed",
                "backend_unavailable",
            )  # fmt: skip
            error = self._refuse(op, rate_limit_error(op.decision))
            self._log(op, names.FAIL_CLOSED, "quotaql: refused %s: %s", RATE_LIMITER_UNAVAILABLE,
                      error.message)  # fmt: skip
            return False
        if result.taken:
            count = result.in_flight[0] if result.in_flight else 0
            op.lease = _Lease(lease, key, names_, taken.leases, self._keeper_of(taken.leases),
                              op.tier.name, count, taken.stray)  # fmt: skip
            self._watch(op)
            self._held(op.tier.name, 1)
            return True
        if taken.stray is not None:  # refused by the local fallback: the stray take goes back
            self._release_later(_Lease(lease, key, names_, None, None, "", 0, taken.stray))
        refusing = result.limited_by or names_[0]
        maximum = next(spec.maximum for spec in taken.specs if spec.name == refusing)
        return self._in_flight_refused(op, _limited_by(refusing), maximum, result.next_free_ms)

    def _in_flight_refused(
        self, op: Operation, limited_by: str, maximum: int, next_free_ms: int | None
    ) -> bool:
        """A full lease set: refuse ``op`` (``TOO_MANY_CONCURRENT``, nothing debited, not
        remembered by the deny cache: a slot may free at any moment), or in shadow mode
        let it run without a lease; True when it runs."""
        if op.mode != "enforce":
            op.violation = op.violation or TOO_MANY_CONCURRENT
            self._log(op, names.SHADOW_BLOCKED, _SHADOW_MESSAGE, TOO_MANY_CONCURRENT)
            return True
        error = too_many_concurrent_error(limited_by, maximum, self._in_flight_wait(next_free_ms))
        self._refuse(op, error)
        self._log(op, names.TOO_MANY_CONCURRENT, "quotaql: refused %s: %s", TOO_MANY_CONCURRENT,
                  error.message)  # fmt: skip
        return False

    def _reject(self, op: Operation, errors: Sequence[GraphQLError]) -> _Flow:
        """Refused before pricing: answer ``errors``, charge the minimum."""
        if op.error is None:
            self._failed(op, errors)
        if op.failed:
            yield from self._charge_minimum(op)

    def _failed(self, op: Operation, errors: Sequence[GraphQLError]) -> None:
        op.refuse(errors[0], None, *errors[1:])
        op.failed = True
        code = op.code or "GRAPHQL_VALIDATION_FAILED"
        self._log(op, names.REJECTED, "quotaql: rejected %s: %s", code, errors[0].message)

    def _charge_minimum(self, op: Operation) -> _Flow:
        """``[limits] min_charge`` from ``op``'s subject: a request refused before pricing,
        a static-limit refusal, or a ``GraphQL-Cost: validate`` request. Out of budget, it
        is refused ``RATE_LIMITED`` (an invalid document keeps its errors) and pays
        nothing; charged once."""
        if op.mode == "off" or op.decision is not None or op.denied:
            return
        paid = yield from self._pay_minimum(op)
        if paid is None:
            return
        decision, op.quotas, op.costs = paid
        op.decision, op.charge = decision, self._config.limits.min_charge
        if decision.allowed:
            return
        if op.mode != "enforce":
            self._log(op, names.SHADOW_BLOCKED, _SHADOW_MESSAGE, error_code(decision))
            return
        self._remember(op, decision, op.quotas)
        if op.error is None:  # a validate-only request: refused like any other
            self._rate_limited(op, decision)

    def _charge_refusal(self, op: Operation) -> _Flow:
        """``min_charge`` for an operation refused because it can never fit
        (``COST_EXCEEDS_CAPACITY``: waiting never helps, so a client that asks again and
        again pays each time, as for a static limit); its answer stays that refusal."""
        paid = yield from self._pay_minimum(op)
        if paid is None:
            return
        decision, quotas, _ = paid
        if decision.allowed:
            op.charge = self._config.limits.min_charge
            op.paid_minimum = decision.source != "fail_open"
        else:
            self._remember(op, decision, quotas)

    def _pay_minimum(
        self, op: Operation
    ) -> Generator[_Step, Any, tuple[Decision, tuple[Quota, ...], tuple[float, ...] | None] | None]:
        """Debit ``[limits] min_charge`` from the quotas a request pays before it is priced:
        the storage's decision, the quotas and their amounts; None when the minimum is 0."""
        config = self._config
        minimum = config.limits.min_charge
        if minimum <= 0:
            return None
        tier = op.tier if self.tier_resolver is not None else None
        multiplier = self.adaptive.multiplier if self.adaptive is not None else 1.0
        quotas, costs = charges.charges_for(config, op.subject, None, tier, minimum, multiplier)
        decision: Decision = yield ("acquire", op.subject.key, minimum, quotas, costs)
        return decision, quotas, costs

    def _deny(
        self, op: Operation, decision: Decision, quotas: tuple[Quota, ...], unpriced: bool = False
    ) -> None:
        """Refuse ``op`` from the deny cache: the storage refused its subject a moment ago."""
        op.denied = True
        op.quotas = quotas
        error = self._rate_limited(op, decision, unpriced=unpriced)
        self._log(op, names.DENIED, "quotaql: denied %s (deny cache): %s", RATE_LIMITED,
                  error.message)  # fmt: skip

    def _rate_limited(
        self, op: Operation, decision: Decision, *, unpriced: bool = False
    ) -> GraphQLError:
        """Refuse ``op`` for the storage's (or the deny cache's) refusal ``decision``: its
        retry time jittered, in the error and in the headers alike."""
        op.decision = decision = self._jittered(decision)
        return self._refuse(op, rate_limit_error(decision, unpriced=unpriced))

    def _remember(
        self, op: Operation, decision: Decision, quotas: tuple[Quota, ...] | None = None
    ) -> None:
        """Keep a refusal of ``op``'s subject (for ``quotas``, default ``op.quotas``) in the
        deny cache (when waiting helps)."""
        minimum = self._config.limits.min_charge
        quotas = op.quotas if quotas is None else quotas
        self._denials.remember(_denial_key(op.subject), decision, quotas, min_charge=minimum)

    def _jittered(self, decision: Decision) -> Decision:
        """``decision`` with its retry time plus up to ``retry_jitter`` of it: never less."""
        jitter = self._config.limits.retry_jitter
        retry = decision.retry_after
        if not jitter or not retry or not math.isfinite(retry):
            return decision
        return decision._replace(retry_after=retry * (1.0 + jitter * random.random()))  # noqa: S311

    def _price(
        self,
        op: Operation,
        schema: Any,
        document: Any,
        variables: Mapping[str, Any] | None,
        operation_name: str | None,
    ) -> bool:
        """Price ``op``; False (with its error set) when the analysis refuses it."""
        cost = self._config.cost
        try:
            try:
                op.report = analyze(
                    schema, document, variables, operation_name, cost.model, cost.limits
                )
            except LimitExceeded as exceeded:
                if op.mode != "shadow":
                    raise
                op.violation = exceeded.code
                self._log(op, names.SHADOW_BLOCKED, _SHADOW_MESSAGE, exceeded.code)
                op.report = analyze(schema, document, variables, operation_name, cost.model)
        except CostAnalysisError as error:
            op.refuse(graphql_error(error))
            self._log(op, names.REJECTED, "quotaql: rejected %s: %s", error.code, error)
            return False
        return True

    def _reject_key(self, op: Operation) -> _Flow:
        """An unknown key under ``unknown_keys = "reject"``: the address pays for the try."""
        quota = op.tier.quota
        config = self._config
        charge = max(_REJECTED_KEY_CHARGE, config.limits.min_charge)
        costs = None
        multiplier = self.adaptive.multiplier if self.adaptive is not None else 1.0
        if multiplier < 1.0 and op.tier.name in config.adaptive_tiers:
            costs = charges.scaled(config.adaptive, (quota,), None, charge, multiplier)
        decision: Decision = yield ("acquire", op.subject.key, charge, (quota,), costs)
        op.quotas, op.decision, op.charge = (quota,), decision, charge
        header = self._config.identity.api_key_header
        if op.mode != "enforce":
            self._log(op, names.SHADOW_BLOCKED, _SHADOW_MESSAGE, "UNKNOWN_API_KEY")
            return
        if not decision.allowed and decision.reason == "rate_limited":
            self._remember(op, decision)  # the address's next tries are refused from memory
            self._rate_limited(op, decision)  # key guessing runs its address dry
        else:
            self._refuse(op, unknown_key_error(header))
            op.decision = None  # no budget headers on a 401
        self._log(op, names.UNKNOWN_KEY, "quotaql: refused %s", op.code)

    def _decided(self, op: Operation, decision: Decision) -> None:
        op.decision = decision
        if not decision.allowed:
            code = error_code(decision)
            waits = op.waits
            if waits is not None and decision.reason == "rate_limited":
                self._delay_refused(op, decision, waits)
            if op.mode == "enforce":
                if waits != names.DELAY_PROCESS_FULL:  # the next one may find a place
                    self._remember(op, decision)
                error = self._rate_limited(op, decision)
                self._log(op, names.BLOCKED, "quotaql: blocked %s: %s", code, error.message)
                return
            self._log(op, names.SHADOW_BLOCKED, _SHADOW_MESSAGE, code)
        if op.span is not None and decision.source in ("fail_open", "fail_closed"):
            fail_open = decision.source == "fail_open"
            op.span.add_event(names.EVENT_FAIL_OPEN if fail_open else names.EVENT_FAIL_CLOSED)

    def _delay_refused(self, op: Operation, decision: Decision, waits: bool | str) -> None:
        """Count the refusal of an operation of a delay tier by one of its own quotas (the
        ``[global]`` quota never waits): its turn was too far or its tenant's line full
        (``queue``), or it could not wait at all (``process_full``, ``sync``)."""
        if self.metrics is None:
            return
        limited_by = decision.limited_by
        if any(quota.name == limited_by and quota.shared for quota in op.quotas):
            return
        reason = waits if isinstance(waits, str) else names.DELAY_QUEUE
        self.metrics.delay_refused(op.tier.name, reason)

    def _settle(self, op: Operation, data: Any, errors: Sequence[GraphQLError] | None) -> _Flow:
        amount, amounts = self._refund_amounts(op, data, errors)
        if amount > 0:
            yield ("refund", op.subject.key, amount, op.quotas, amounts, op.decision)
        op.refunded = amount
        if amount > 0:
            if op.span is not None:
                op.span.add_event(names.EVENT_REFUND, {"quotaql.refund": amount})
            if op.decision is not None:
                op.decision = _refunded(op.decision, amount, amounts)

    def _refund_amounts(
        self, op: Operation, data: Any, errors: Sequence[GraphQLError] | None
    ) -> tuple[float, tuple[float, ...] | None]:
        """The actual cost (when shown or refunded), and what to give back to each quota:
        never below ``min_charge``; each quota's refund scaled by the factor adaptive limits
        scaled its debit by (``op.base``), whatever the multiplier is now.

        The operation's latency and errors are one sample of the adaptive limits' signal
        here, once (``settle`` calls this once per operation that ran)."""
        started = op.started
        if started is not None:
            op.started = None
            adaptive = self.adaptive
            if adaptive is not None and adaptive.measures and op.runs:
                now = adaptive.clock()
                adaptive.observe(op.subject.key, now - started, unexpected_error(errors), now)
        report = op.report
        if report is None or op.error is not None or op.header == "validate":
            return 0.0, None
        if report.operation_type == "subscription":
            return 0.0, None  # each event is charged as it is delivered
        limits = self._config.limits
        refund = limits.refund_unused and op.debited
        if not (refund or limits.expose_cost or op.header is not None):
            return 0.0, None
        if errors and not all(_has_path(error) for error in errors):
            # The operation ran and an error says nothing of where (execution itself failed,
            # or a formatter dropped the paths): what it erased is unknown, nothing goes back.
            op.actual = report.cost
        else:  # the plan that priced it, walked against the data
            sample = self._config.cost.tuning_sample
            if self.metrics is not None and sample and random.random() < sample:  # noqa: S311
                op.sizes = []
            op.actual = report.actual(data, errors or None, op.sizes)
        kept = max(op.actual, limits.min_charge)
        amount = max(0.0, op.charge - kept) if refund else 0.0
        quotas = op.quotas
        base, debits = op.base, op.costs
        if base is not None and debits is not None and amount > 0:
            # What the debit took per point of cost, for each quota: 1/m, or less where the
            # debit was clamped to the quota's maximum. Never the multiplier of now: a
            # tenant that paid before the pressure rose must not be refunded at its price.
            return amount, tuple(
                amount * (debit / paid if paid > 0 else 1.0) if quota.refundable else 0.0
                for quota, debit, paid in zip(quotas, debits, base, strict=True)
            )
        if amount <= 0 or (len(quotas) == 1 and quotas[0].refundable):
            return amount, None
        amounts = tuple(amount if quota.refundable else 0.0 for quota in quotas)
        return amount, None if 0.0 not in amounts else amounts

    def _event(self, op: Operation) -> _Flow:
        op.events += 1
        if op.events == 1 or op.mode == "off" or not op.quotas or op.error is not None:
            return None  # the first event was paid when the subscription started
        adaptive = self.adaptive
        if adaptive is not None:
            adaptive.poll()
            if adaptive.multiplier != op.multiplier:
                self._rescale(op, adaptive.multiplier)
        decision: Decision = yield ("acquire", op.subject.key, op.charge, op.quotas, op.costs)
        if self.metrics is not None:
            outcome = names.ALLOWED if decision.allowed else names.BLOCKED
            if not decision.allowed and op.mode != "enforce":
                outcome = names.SHADOW_BLOCKED
            charged = op.charge if decision.allowed and decision.source != "fail_open" else 0.0
            self.metrics.event(outcome, op.tier.name, charged)
        if decision.allowed:
            op.decision = decision  # what the subscriber has left now
            return None
        if op.mode != "enforce":
            self._log(op, names.SHADOW_BLOCKED, _SHADOW_MESSAGE, error_code(decision))
            return None
        error = self._rate_limited(op, decision)
        self._log(op, names.BLOCKED, "quotaql: ended a subscription %s: %s", RATE_LIMITED,
                  error.message)  # fmt: skip
        return error

    # -- drivers: the same flow with plain calls, or awaited --------------------------------

    def _step(self, step: _Step) -> Any:
        """Run one step of a flow: a limiter call (its result or an awaitable of it)."""
        kind = step[0]
        if kind == "await":
            return step[1]
        limiter = self.limiter
        if kind == "acquire":
            _, key, amount, quotas, amounts = step
            if amounts is None:
                return limiter.acquire(key, amount, quotas)
            return limiter.acquire(key, amount, quotas, costs=amounts)
        if kind == "refund":
            _, key, amount, quotas, amounts, decision = step  # the refund of decision's debit
            return limiter.refund(key, amount, quotas, amounts=amounts, decision=decision)
        if kind == "lease":
            return self._take(step[1], step[2], step[3])
        return self._release(step[1])  # "release": an operation's lease, now

    def _drive(self, flow: _Flow, *, storage: bool = True) -> Any:
        """Run ``flow`` with plain calls; ``storage=False``: a flow that calls no storage
        (:meth:`begin`), which runs even when the storage is async."""
        if storage and self.is_async:  # its limiter's calls are coroutines: not here
            flow.close()
            raise TypeError(
                "quotaql: this gate's storage is async (AsyncRedisStorage): use the async"
                " entry points (admit_async...; in Strawberry schema.execute, not"
                " execute_sync; in Ariadne the ASGI app, not the WSGI one)"
            )
        step = self._step
        value: Any = None
        try:
            while True:  # a sync flow never yields an awaitable (identity knows it cannot)
                value = step(flow.send(value))
        except StopIteration as stop:
            return stop.value
        except BaseException:
            flow.close()  # what the flow holds (a subscription's slot) is given back
            raise

    async def _drive_async(self, flow: _Flow) -> Any:
        value: Any = None
        try:
            step = flow.send(None)
            while True:
                value = self._step(step)
                if inspect.isawaitable(value):
                    try:
                        value = await value
                    except Exception as error:  # a hook's coroutine failed: the flow decides
                        step = flow.throw(error)
                        continue
                step = flow.send(value)
        except StopIteration as stop:
            return stop.value
        except BaseException:  # cancelled (the client left) or failed
            flow.close()  # what the flow holds (a subscription's slot) is given back
            raise

    # -- concurrency leases ----------------------------------------------------------------

    def _configure_leases(self, config: Config) -> None:
        """The lease storage, once a tier has a concurrency limit: the one that matches the
        gate's storage (:class:`MemoryLeases` for memory, :class:`RedisLeases` /
        :class:`AsyncRedisLeases` on a Redis storage's own client), unless ``leases=`` gave
        one."""
        if self._leasing.leases is not None or not any(
            charges.in_flight(tier) is not None for tier in config.tiers.values()
        ):
            return
        storage = self.storage
        if isinstance(storage, AsyncRedisStorage):
            leases: Any = AsyncRedisLeases(storage)
        elif isinstance(storage, RedisStorage):
            leases = RedisLeases(storage)
        else:
            if not isinstance(storage, MemoryStorage):
                self._say_once(
                    "leases_in_memory",
                    f"quotaql: the {type(storage).__name__} storage has no lease storage of its"
                    " own: the concurrency limits (max_in_flight) are counted in this process's"
                    " memory, per process; pass Gate(leases=...) to share them",
                )
            leases = MemoryLeases()
        self._set_leases(leases)

    def _set_leases(self, leases: Leases | AsyncLeases) -> None:
        self._leasing.leases = leases
        self._leasing.leases_async = inspect.iscoroutinefunction(leases.take)
        self._leasing.leases_fallible = not isinstance(leases, MemoryLeases)
        self._leasing.lease_backend = getattr(leases, "name", type(leases).__name__)

    def _keeper_of(self, leases: Any) -> LeaseKeeper:
        """The keeper that renews what ``leases`` holds, with the ``lease_ttl`` in force
        (one per storage and ttl: a reload that changes the ttl renews new leases with it)."""
        ttl_ms = round(self._config.limits.lease_ttl * 1000)
        slot = (id(leases), ttl_ms)
        keeper = self._leasing.keepers.get(slot)
        if keeper is None:
            with self._leasing.lease_lock:
                keeper = self._leasing.keepers.get(slot)
                if keeper is None:
                    keeper = self._leasing.keepers[slot] = LeaseKeeper(leases, ttl_ms)
                    if self.metrics is not None:
                        self.metrics.watch_leases(keeper)
        return keeper

    def _local_leases(self) -> MemoryLeases:
        """The process-local lease sets of the ``local`` fail mode."""
        local = self._leasing.fallback_leases
        if local is None:
            with self._leasing.lease_lock:
                local = self._leasing.fallback_leases
                if local is None:
                    local = self._leasing.fallback_leases = MemoryLeases()
        return local

    def _local_specs(self, specs: tuple[LeaseSpec, ...]) -> tuple[LeaseSpec, ...]:
        """``specs`` as this process enforces them alone: ``max(1, ceil(maximum ×
        local_share))`` each (the ``local`` fail mode, as rate quotas start from their
        share)."""
        share = self._leasing.local_share
        cache = self._leasing.local_spec_cache
        local = []
        for spec in specs:
            mine = cache.get(spec)
            if mine is None:
                mine = LeaseSpec(spec.name, max(1, math.ceil(spec.maximum * share)))
                if len(cache) < 4096:
                    cache[spec] = mine
            local.append(mine)
        return tuple(local)

    def _take(self, key: str, specs: tuple[LeaseSpec, ...], lease: str) -> Any:
        """Take ``lease`` in the sets of ``specs``: a :class:`_Taken`, or an awaitable of one
        (async lease storage). A storage failure (or an open breaker) is answered by the
        fail mode here, never raised."""
        leases = self._leasing.leases
        ttl_ms = round(self._config.limits.lease_ttl * 1000)
        if self._leasing.leases_async:
            return self._take_async(leases, key, specs, lease, ttl_ms)
        if not self._leasing.leases_fallible:
            return self._took(key, specs, lease, leases.take(key, specs, lease, ttl_ms), leases)
        result = self._lease_call(leases.take, key, specs, lease, ttl_ms)
        return self._took(key, specs, lease, result, leases)

    async def _take_async(
        self, leases: Any, key: str, specs: tuple[LeaseSpec, ...], lease: str, ttl_ms: int
    ) -> _Taken:
        # The take runs to its answer even when its caller leaves (cancelled), and only then
        # is its lease given back: released at once, the release could reach Redis first
        # (on the pipeline's other connection, or while a NOSCRIPT take is sent again) and
        # the lease be taken after it, held until its ttl.
        call = asyncio.ensure_future(self._lease_call_async(leases.take, key, specs, lease,
                                                            ttl_ms))  # fmt: skip
        try:
            result = await asyncio.shield(call)
        except BaseException:
            self._spawn(self._release_when_answered(call, key, specs, lease, leases))
            raise
        return self._took(key, specs, lease, result, leases)

    async def _release_when_answered(
        self,
        call: asyncio.Future[Any],
        key: str,
        specs: tuple[LeaseSpec, ...],
        lease: str,
        leases: Any,
    ) -> None:
        """The take of a caller that left, once answered: what it may have taken goes back
        (a refusal took nothing; a failure may have taken it anyway)."""
        try:
            result = await call
        except Exception:  # no answer to go by
            result = _UNAVAILABLE
        if result is _UNAVAILABLE or result.taken:  # given back as a stray take is
            names_ = tuple(spec.name for spec in specs)
            done = self._give_back(_Lease(lease, key, names_, None, None, "", 0, leases))
            if done is not None:
                await done

    def _took(
        self, key: str, specs: tuple[LeaseSpec, ...], lease: str, result: Any, leases: Any
    ) -> _Taken:
        """What a take answered: held by the keeper when taken; the fail mode when the
        storage did not answer (``local``: a lease in this process's sets)."""
        if result is not _UNAVAILABLE:
            self._count_lease(names.LEASE_TAKEN if result.taken else names.LEASE_REFUSED)
            if result.taken:
                self._keeper_of(leases).hold(key, [spec.name for spec in specs], lease)
            return _Taken(result, leases, specs, None)
        self._count_lease(names.LEASE_TAKE_FAILED)
        if self._leasing.fail_mode != "local":
            return _Taken(None, None, specs, leases)
        local = self._local_leases()
        mine = self._local_specs(specs)
        ttl_ms = round(self._config.limits.lease_ttl * 1000)
        taken = local.take(key, mine, lease, ttl_ms)
        self._count_lease(names.LEASE_TAKEN if taken.taken else names.LEASE_REFUSED)
        if taken.taken:
            self._keeper_of(local).hold(key, [spec.name for spec in mine], lease)
        return _Taken(taken, local, mine, leases)

    def _lease_call(self, method: Callable[..., Any], *args: Any) -> Any:
        """``method(*args)`` on a lease storage that can fail, through the limiter's
        breaker (one view of the storage's health): its result, or ``_UNAVAILABLE``."""
        breaker = self.limiter.breaker
        if not breaker.allow():
            return _UNAVAILABLE
        try:
            result = method(*args)
        except StorageError as error:
            self._lease_failed(error)
            return _UNAVAILABLE
        except BaseException:
            breaker.abandon()
            raise
        if breaker.success():
            self._recorder.circuit(self._leasing.lease_backend, False)
        return result

    async def _lease_call_async(self, method: Callable[..., Any], *args: Any) -> Any:
        """:meth:`_lease_call`, awaited."""
        breaker = self.limiter.breaker
        if not breaker.allow():
            return _UNAVAILABLE
        try:
            result = await method(*args)
        except StorageError as error:
            self._lease_failed(error)
            return _UNAVAILABLE
        except BaseException:
            breaker.abandon()
            raise
        if breaker.success():
            self._recorder.circuit(self._leasing.lease_backend, False)
        return result

    def _lease_failed(self, error: StorageError) -> None:
        self._recorder.backend_error(self._leasing.lease_backend, error)
        if self.limiter.breaker.failure(timeout=isinstance(error, StorageTimeout)):
            self._recorder.circuit(self._leasing.lease_backend, True)

    def _release(self, op: Operation, *, end_span: bool = False) -> Any:
        """Give ``op``'s lease back now: None when done, or a coroutine that does it (async
        lease storage; with ``end_span``, it ends ``op``'s span once done)."""
        lease = op.lease
        if lease is None:
            return None
        op.lease = None
        self._unwatch(op)
        return self._give_back(lease, op.span if end_span else None)

    def _give_back(self, lease: _Lease, span: Any = None) -> Any:
        """Stop renewing ``lease`` and release it (and its stray take): None when done, or a
        coroutine that does it."""
        held = lease.leases
        if held is not None and lease.keeper is not None:
            lease.keeper.drop(lease.key, lease.names, lease.id)
            self._held(lease.tier, -1)
        if self._leasing.leases_async and (held is self._leasing.leases or lease.stray is not None):
            return self._give_back_async(lease, span)
        if held is not None:
            self._released(lease, self._release_in(held, lease), span)
        if lease.stray is not None and lease.stray is not held:
            self._release_in(lease.stray, lease)
        return None

    async def _give_back_async(self, lease: _Lease, span: Any) -> None:
        try:
            held = lease.leases
            args = (lease.key, lease.names, lease.id)
            if held is not None:
                if held is self._leasing.leases:
                    count = await self._lease_call_async(held.release, *args)
                else:  # the local fallback's
                    count = self._release_in(held, lease)
                self._released(lease, count, span)
            stray = lease.stray
            if stray is not None and stray is not held:
                await self._lease_call_async(stray.release, *args)
        finally:
            if span is not None:
                span.end()

    def _release_in(self, leases: Any, lease: _Lease) -> Any:
        """Release ``lease`` in a synchronous lease storage: in how many sets it was live,
        or ``_UNAVAILABLE``."""
        if isinstance(leases, MemoryLeases):
            return leases.release(lease.key, lease.names, lease.id)
        return self._lease_call(leases.release, lease.key, lease.names, lease.id)

    def _released(self, lease: _Lease, count: Any, span: Any) -> None:
        """Count what a release found: live in every set, expired in one (a stall or an
        outage longer than ``lease_ttl``: logged), or not made (the storage failed)."""
        if count is _UNAVAILABLE:
            self._count_lease(names.LEASE_RELEASE_FAILED)
            return
        if count >= len(lease.names):
            self._count_lease(names.LEASE_RELEASED)
            return
        self._count_lease(names.LEASE_EXPIRED)
        if span is not None:
            span.add_event(names.EVENT_LEASE_EXPIRED, {"quotaql.lease.live_in": count})
        tenant = hashed_tenant(lease.key)
        self.log.log(
            logging.WARNING,
            "lease_expired",
            "quotaql: a lease of tenant %s (tier %s) expired before its operation ended (a"
            " stall or a storage outage longer than lease_ttl): its slot may have been taken"
            " meanwhile",
            tenant,
            lease.tier,
            tenant=tenant,
            tier=lease.tier,
            limits=list(lease.names),
        )

    def _release_later(self, lease: _Lease) -> None:
        """Release ``lease`` without waiting for it (a flow being closed cannot await)."""
        done = self._give_back(lease)
        if done is not None:
            self._spawn(done)

    def _let_go(self, op: Operation) -> None:
        """``op``'s flow is being closed (its client left): its lease goes back."""
        lease = op.lease
        if lease is not None:
            op.lease = None
            self._unwatch(op)
            self._release_later(lease)

    def _spawn(self, coroutine: Any, span: Any = None) -> None:
        """Run a release coroutine as a task of the running loop (kept until it ends); with
        no loop running, it cannot run: its lease expires within ``lease_ttl`` (and the
        ``span`` it was to end ends now)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            coroutine.close()
            self._count_lease(names.LEASE_RELEASE_FAILED)
            if span is not None:
                span.end()
            return
        task = loop.create_task(coroutine)
        self._leasing.releasing.add(task)
        task.add_done_callback(self._leasing.releasing.discard)

    def _watch(self, op: Operation) -> None:
        """Should ``op`` be dropped without being finished (an adapter that never calls
        :meth:`finish`), its lease is given back rather than renewed for good."""
        lease = op.lease
        if lease is not None:
            self._leasing.finalizers[id(op)] = weakref.finalize(op, self._dropped, id(op), lease)

    def _dropped(self, ident: int, lease: _Lease) -> None:
        """An operation holding ``lease`` was collected unfinished (in a garbage collection:
        no lock here, the lease is only queued: the next take gives it back)."""
        self._leasing.finalizers.pop(ident, None)
        self._leasing.abandoned.append(lease)

    def _unwatch(self, op: Operation) -> None:
        finalizer = self._leasing.finalizers.pop(id(op), None)
        if finalizer is not None:
            finalizer.detach()

    def _release_abandoned(self) -> None:
        """Give back the leases of operations dropped without :meth:`finish` (their
        finalizers only queue them: no lock is taken in a garbage collection)."""
        abandoned = self._leasing.abandoned
        while abandoned:
            try:
                lease = abandoned.popleft()
            except IndexError:
                return
            self._release_later(lease)

    def _held(self, tier: str, change: int) -> None:
        """Follow the leases this process holds, per tier (``quotaql_in_flight``)."""
        with self._leasing.lease_lock:
            count = self._leasing.in_flight.get(tier, 0) + change
            self._leasing.in_flight[tier] = count
        if self.metrics is not None:
            self.metrics.in_flight(tier, count)

    def _count_lease(self, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.leases(outcome)

    def _in_flight_wait(self, next_free_ms: int | None) -> float:
        """The ``Retry-After`` of a concurrency refusal: ``concurrency_retry_after``, or
        less when the earliest lease of the full set expires sooner, jittered."""
        limits = self._config.limits
        retry = limits.concurrency_retry_after
        if next_free_ms is not None:
            retry = min(retry, max(next_free_ms, 10) / 1000)
        if limits.retry_jitter:
            retry *= 1.0 + limits.retry_jitter * random.random()  # noqa: S311
        return round(retry, 3)

    def in_flight(self) -> dict[str, int]:
        """The leases this process holds now, per tier (the ``quotaql_in_flight`` gauge)."""
        with self._leasing.lease_lock:
            return {tier: count for tier, count in self._leasing.in_flight.items() if count}

    @property
    def lease_keepers(self) -> tuple[LeaseKeeper, ...]:
        """The keepers renewing the leases this process holds (one per lease storage and
        ``lease_ttl``; none before the first lease): ``len(keeper)`` is what each renews."""
        return tuple(self._leasing.keepers.values())

    @property
    def leases(self) -> Leases | AsyncLeases | None:
        """Where the concurrency leases live (None until a tier has a concurrency limit)."""
        leases: Leases | AsyncLeases | None = self._leasing.leases
        return leases

    # -- shutdown -----------------------------------------------------------------------------

    def flush(self, timeout: float = 5.0) -> int:
        """Apply the refunds the limiter still holds (deferred refunds, see
        docs/limiter.md), at shutdown: how many are left after ``timeout`` seconds.

        Raises:
            TypeError: the storage is async: ``await`` :meth:`aflush`.
        """
        limiter = self.limiter
        if isinstance(limiter, AsyncLimiter):
            raise TypeError("quotaql: this gate's storage is async: await gate.aflush()")
        return limiter.flush(timeout)

    async def aflush(self, timeout: float = 5.0) -> int:
        """:meth:`flush` on an event loop (ASGI lifespan shutdown): the lease releases under
        way are awaited, then the limiter's refunds applied; how many are left."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        releasing = [task for task in self._leasing.releasing if task.get_loop() is loop]
        if releasing:
            await asyncio.wait(releasing, timeout=timeout)
        left = max(0.0, deadline - loop.time())
        limiter = self.limiter
        if isinstance(limiter, AsyncLimiter):
            return await limiter.flush(left)
        return await asyncio.to_thread(limiter.flush, left)

    # -- pieces ----------------------------------------------------------------------------

    def _take_slot(self, op: Operation, limit: int | None) -> bool:
        """One of the subject's subscription slots for ``op``; False when all are taken."""
        if not self._slots.take(op.subject.key, limit):
            return False
        op.slot = True
        if self.metrics is not None:
            self.metrics.subscriptions(self._slots.total())
        return True

    def _free_slot(self, op: Operation) -> None:
        if not op.slot:
            return
        op.slot = False
        self._slots.give_back(op.subject.key)
        if self.metrics is not None:
            self.metrics.subscriptions(self._slots.total())

    def _adapt(self, op: Operation, adaptive: Adaptive, config: Config, timed: bool) -> None:
        """Adaptive limits on ``op`` about to be debited: its start time (``timed``: its
        latency is a sample), the signal's update when a second has passed, and its debits
        divided by the multiplier when its tier is one that adaptation scales."""
        now = adaptive.clock()
        adaptive.poll(now)
        if timed:
            op.started = now
        multiplier = adaptive.multiplier
        if multiplier < 1.0 and op.tier.name in config.adaptive_tiers:
            op.base = op.costs if op.costs is not None else (op.charge,) * len(op.quotas)
            op.costs = charges.scaled(config.adaptive, op.quotas, op.costs, op.charge, multiplier)
            op.multiplier = multiplier

    def _rescale(self, op: Operation, multiplier: float) -> None:
        """``op``'s debits under ``multiplier`` (a subscription's later event)."""
        config = self._config
        if op.tier.name not in config.adaptive_tiers:
            return
        base = op.base if op.base is not None else op.costs
        if multiplier < 1.0:
            op.base = base if base is not None else (op.charge,) * len(op.quotas)
            op.costs = charges.scaled(config.adaptive, op.quotas, base, op.charge, multiplier)
        else:  # back to what it paid at the start: None when every quota paid the charge
            same = base is None or all(amount == op.charge for amount in base)
            op.base, op.costs = None, None if same else base
        op.multiplier = multiplier

    def _check_pressure(self, config: Config) -> None:
        """``config``'s ``[adaptive]`` table against this gate's arguments."""
        adaptive = config.adaptive
        if adaptive.enabled and "callable" in adaptive.sources and self._pressure is None:
            raise ConfigError(
                'lists "callable", but the gate has no pressure callable: pass'
                " Gate(pressure=fn) (or the adapter's pressure= keyword), or drop it",
                file=config.source,
                key="adaptive.sources",
            )

    def _adaptive_updated(self, adaptive: Adaptive) -> None:
        """Export the signal and the multiplier (once a second, and at configuration)."""
        metrics = self.metrics
        if metrics is None:
            return
        config = self._config
        scaled, m = config.adaptive_tiers, adaptive.computed
        multipliers = {name: m if name in scaled else 1.0 for name in config.tiers}
        metrics.adaptive(adaptive.pressures, multipliers, engaged=adaptive.engaged)

    def _adaptive_transition(self, to: str) -> None:
        if self.metrics is not None:
            self.metrics.adaptive_transition(to)

    def _refuse(self, op: Operation, error: GraphQLError) -> GraphQLError:
        """Refuse ``op`` with a limiter's ``error`` and the HTTP status its code has."""
        code = (error.extensions or {}).get("code")
        op.refuse(error, status_for(str(code), self._config.limits.http_status))
        return error

    def _refresh(self, schema: Any) -> None:
        if self._checked_schema is not schema:
            self.check(schema)
        if self._reloader is not None:
            config = self._reloader.poll(schema, self._config)
            if config is not None:
                self._config = config
                self._denials = DenyCache(config.limits.deny_cache_size)  # new budgets
                self._configured(config)

    def _configured(self, config: Config) -> None:
        """Set up what ``config`` asks of the gate itself (adaptive limits), and say once
        what an unsafe setting of it means."""
        self._configure_adaptive(config)
        self._configure_leases(config)
        if config.identity.unknown_keys == "tenant":
            self._say_once(
                "unknown_keys_tenant",
                'quotaql: [identity] unknown_keys = "tenant": every API key is a tenant of its'
                " own, so a client that sends a new key each time gets a new budget each"
                " time; do not use it on a public API (docs/identity.md)",
                logging.WARNING,
            )

    def _configure_adaptive(self, config: Config) -> None:
        adaptive, settings = self.adaptive, config.adaptive
        tiers = sorted(config.adaptive_tiers)
        if not settings.enabled:
            if adaptive is not None:  # turned off by a reload: nothing scaled from now on
                adaptive.configure(settings, tiers)
                self._adaptive_updated(adaptive)
                self.adaptive = None
        elif adaptive is None:
            self.adaptive = adaptive = Adaptive(
                settings,
                pressure=self._pressure,
                log=self.log,
                tiers=tiers,
                on_update=self._adaptive_updated,
                on_transition=self._adaptive_transition,
            )
            if self.metrics is not None:
                self.metrics.adaptive_transitions()  # both series from 0
            self._adaptive_updated(adaptive)
        else:
            adaptive.configure(settings, tiers)
            self._adaptive_updated(adaptive)
        if self._pressure is not None and not (settings.enabled and "callable" in settings.sources):
            self._say_once(
                "pressure_unused",
                "quotaql: the gate has a pressure callable, but [adaptive] does not read it"
                ' (mode "off", or "callable" not in sources)',
            )
        if not settings.enabled:
            return
        share = settings.max_tenant_share
        latency = "latency" in settings.sources and share >= 1.0 - settings.latency_percentile
        errors = "errors" in settings.sources and (
            share
            >= settings.error_target
            + settings.engage_at * (settings.error_saturate - settings.error_target)
        )
        if latency or errors:
            self._say_once(
                "adaptive_unfair",
                f"quotaql: [adaptive] max_tenant_share = {share:g} lets one tenant alone"
                " reach engage_at (keep it below 1 - latency_percentile and below the error"
                " share that reaches engage_at; docs/adaptive.md)",
            )

    def _say_once(self, event: str, message: str, level: int = logging.WARNING) -> None:
        if event in self._said:
            return
        self._said.add(event)
        self.log.log(level, event, message)

    def _tier(self, subject: Subject, context: Any) -> TierConfig:
        config = self._config
        if self.tier_resolver is None:
            return config.tier_of(subject.tenant)
        try:
            name = self.tier_resolver(subject, context)
        except Exception as error:  # a bug in the resolver must not fail the request
            self.log.log(
                logging.ERROR,
                "tier_resolver_failed",
                "quotaql: tier_resolver() failed (%s: %s); using the default tier",
                type(error).__name__,
                error,
            )
            name = None
        if name is None:
            return config.tier_of(None)
        tier = config.tiers.get(str(name))
        if tier is None:
            self.log.log(
                logging.WARNING,
                "unknown_tier",
                "quotaql: the tier resolver named an unknown tier %r; using the default tier",
                name,
                tier=name,
            )
            return config.tier_of(None)
        return tier

    def _log(self, op: Operation, event: str, message: str, *args: object) -> None:
        """Log ``message % args`` about ``op`` with its subject (hashed), tier and cost;
        nothing is built for a record the rate limit drops (a flood of refusals)."""
        suppressed = self.log.take(logging.INFO, event)
        if suppressed is None:
            return
        tenant, tier = hashed_tenant(op.subject.key), op.tier.name
        self.log.emit(
            logging.INFO, event, suppressed, message + " (tenant %s, tier %s)", *args, tenant,
            tier, tenant=tenant, identity=op.subject.source, tier=tier, cost=op.cost,
        )  # fmt: skip


class Adapter:
    """What every framework adapter shares: one :class:`Gate`, built from the same keywords.

    Every keyword but ``quiet_logs`` and ``gate`` configures the gate (see :class:`Gate`).

    Args:
        quiet_logs: drop the framework's own log record of each refusal quotaql answers
            (quotaql logs them itself, rate-limited); each adapter says which.
        gate: a gate built already (then no other keyword but ``quiet_logs``).
    """

    def __init__(
        self,
        config: Config | None = None,
        *,
        quiet_logs: bool = True,
        gate: Gate | None = None,
        **options: Any,
    ) -> None:
        if gate is not None and (config is not None or options):
            raise TypeError(f"{type(self).__name__}(gate=...) takes no other configuration")
        self.gate = gate if gate is not None else Gate(config, **options)
        self.quiet_logs = quiet_logs

    @classmethod
    def from_config(cls, path: str | os.PathLike[str], **kwargs: Any) -> Self:
        """An adapter configured by ``path`` (``quotaql.toml``), reloaded when it changes.

        Raises:
            ConfigError: the file is invalid (the error names the file, key and line).
        """
        return cls(load_config(path), config_path=path, **kwargs)

    @property
    def config(self) -> Config:
        """The configuration in force."""
        return self.gate.config

    @property
    def storage(self) -> Any:
        """Where budgets live."""
        return self.gate.storage

    @property
    def limiter(self) -> Limiter | AsyncLimiter:
        """The limiter in front of the storage."""
        return self.gate.limiter

    @property
    def is_async(self) -> bool:
        """The storage is async: only the async entry points work."""
        return self.gate.is_async

    @property
    def tracing(self) -> Tracing | None:
        """The spans' source (None without a tracer provider)."""
        return self.gate.tracing

    @property
    def metrics(self) -> PrometheusMetrics | None:
        """The Prometheus metrics (None without them)."""
        return self.gate.metrics

    def check(self, schema: Any) -> None:
        """Check the cost model and root-field quotas against ``schema`` (at startup).

        Raises:
            ConfigError: a weight or a field quota names a coordinate that is not in it.
        """
        self.gate.check(schema)


_SHADOW_MESSAGE = "quotaql: shadow mode would have blocked %s"


def _check(config: Config, schema: Any) -> None:
    """``config`` against ``schema``: its weights' and its root-field quotas' coordinates."""
    check_model(schema, config.cost.model)
    charges.check_fields(config, schema)


def _refunded(decision: Decision, amount: float, amounts: Sequence[float] | None) -> Decision:
    """``decision`` as it stands after a refund: each quota got back its amount (``amount``,
    or its own of ``amounts``), and the tightest one now may be another."""
    statuses = decision.quotas
    if len(statuses) <= 1:
        given_back = amounts[0] if amounts else amount  # its own amount, when scaled
        remaining = min(decision.limit, decision.remaining + given_back)
        statuses = tuple(status._replace(remaining=remaining) for status in statuses)
        return decision._replace(remaining=remaining, quotas=statuses)
    given = amounts if amounts is not None else (amount,) * len(statuses)
    back = tuple(
        status._replace(remaining=min(status.limit, status.remaining + each))
        for status, each in zip(statuses, given, strict=True)
    )
    tightest = min(back, key=lambda status: status.remaining)  # the first of equals
    return decision._replace(
        remaining=tightest.remaining,
        limit=tightest.limit,
        reset_after=tightest.reset_after,
        quotas=back,
    )


def _limited_by(name: str) -> str:
    """The ``limited_by`` of a refusing lease set: ``in_flight`` (the tier's),
    ``in_flight:subscriptions``, ``in_flight:field:<coordinate>``."""
    if name == TIER_LEASES:
        return IN_FLIGHT
    if name == SUBSCRIPTION_LEASES:
        return IN_FLIGHT_SUBSCRIPTIONS
    return f"{IN_FLIGHT}:{name}"  # FIELD_LEASES: in_flight:field:<coordinate>


def _subject_debit(op: Operation) -> float:
    """The least ``op`` debits a quota that refuses its subject (``tenant``, ``user``,
    ``global``): what the deny cache compares a kept refusal with, never more than the
    refusing quota's own debit (the cache may only err towards asking the storage)."""
    costs = op.costs or ()
    debits = [
        debit
        for quota, debit in zip(op.quotas, costs, strict=True)
        if quota.name in ("tenant", "user", "global")
    ]
    return min(debits, default=op.charge)


def _has_path(error: Any) -> bool:
    """An execution error that says which field it erased (a ``GraphQLError``'s ``path``,
    or a formatted error's ``"path"``)."""
    path = error.get("path") if isinstance(error, dict) else getattr(error, "path", None)
    return bool(path)


def _denial_key(subject: Subject) -> str:
    """The deny cache's key: a user's refusal (``per_user``) is not its tenant's."""
    user = subject.user
    return subject.key if user is None else f"{subject.key}\0{user}"


def _operation_type(document: Any, operation_name: str | None) -> str | None:
    """The type of the operation that runs, before (or without) pricing it."""
    if not isinstance(document, DocumentNode):
        return None
    try:
        operation, _ = select_operation(document, operation_name)
    except CostAnalysisError:
        return None
    return operation.operation.value


def _cost_header(request: Any) -> CostHeader | None:
    value = web.header(request, "graphql-cost")
    if value is None:
        return None
    value = value.strip().lower()
    if value == "validate":
        return "validate"
    if value == "report":
        return "report"
    return None


def _restore_rate(quota: Quota) -> float:
    if quota.refill_per_second is not None:
        return float(quota.refill_per_second)
    return quota.maximum / float(quota.window_seconds or 1)
