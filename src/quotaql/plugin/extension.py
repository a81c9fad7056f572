"""The Strawberry schema extension: price each operation, debit the tenant, refund, answer.

``CostLimiter`` is configured once and holds the shared state (the config, the limiter and
its storage); Strawberry calls it for every request and gets a fresh extension object, so
no request sees another's state.
"""

from __future__ import annotations

import contextvars
import inspect
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any, Literal

from graphql import ExecutionResult, GraphQLError
from strawberry.extensions import SchemaExtension
from strawberry.types.graphql import OperationType

from quotaql.config import Config, TierConfig, default_config, load_config
from quotaql.cost_analysis import analyze, check_model
from quotaql.cost_analysis.actual import actual_cost
from quotaql.cost_analysis.analyzer import parse_document
from quotaql.errors import ConfigError, CostAnalysisError, LimitExceeded
from quotaql.instrumentation import names
from quotaql.instrumentation.logs import LogRecorder, StructuredLog
from quotaql.instrumentation.tracing import Tracing, hashed_tenant
from quotaql.limiter import AsyncLimiter, CircuitBreaker, Limiter, MultiRecorder
from quotaql.plugin.contract import (
    cost_extension,
    error_code,
    rate_limit_error,
    rate_limit_headers,
    status_for,
)
from quotaql.storage.memory import MemoryStorage

if TYPE_CHECKING:
    from strawberry.types import ExecutionContext

    from quotaql.cost_analysis import CostReport
    from quotaql.instrumentation.metrics import PrometheusMetrics
    from quotaql.limiter import Recorder
    from quotaql.policy.quota import Decision, Quota

__all__ = ["CostLimiter", "current_operation", "default_identify"]

Identify = Callable[[Any], "str | None"]
TierResolver = Callable[[str, Any], "str | None"]
CostHeader = Literal["validate", "report"]
ANONYMOUS = "anonymous"


def _error_classes(base: type[CostAnalysisError]) -> list[type[CostAnalysisError]]:
    found = [base]
    for sub in base.__subclasses__():
        found.extend(_error_classes(sub))
    return found


def default_identify(context: Any) -> str | None:
    """The ``X-API-Key`` request header, else the client's address, else None."""
    request = _item(context, "request")
    if request is None:
        return None
    headers = getattr(request, "headers", None)
    key = headers.get("x-api-key") if headers is not None else None
    if key:
        return str(key)
    host = getattr(getattr(request, "client", None), "host", None)
    return str(host) if host else None


def _item(context: Any, name: str) -> Any:
    """``context[name]`` for dict contexts, ``context.name`` for context objects."""
    if isinstance(context, dict):
        return context.get(name)
    return getattr(context, name, None)


class _OwnRefusals(logging.Filter):
    """Drops Strawberry's own ERROR record of each refusal quotaql answers.

    Strawberry logs every error of every response; quotaql logs its refusals itself, with
    fields and rate-limited, so that a flood of refused requests cannot flood the logs.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.msg
        if not isinstance(error, GraphQLError) or not error.extensions:
            return True
        code = error.extensions.get("code")
        return not (isinstance(code, str) and code in _OWN_CODES)


_OWN_CODES = frozenset(
    {"RATE_LIMITED", "COST_EXCEEDS_CAPACITY", "RATE_LIMITER_UNAVAILABLE"}
    | {cls.code for cls in _error_classes(CostAnalysisError)}
)
_OWN_REFUSALS = _OwnRefusals()


class Operation:
    """One operation's price, decision and refund, as the extension worked them out.

    Attributes:
        tenant: who pays.
        tier: the tenant's tier.
        mode: ``enforce``, ``shadow`` or ``off`` for this tier.
        report: the static price (None when the analysis refused the operation).
        quotas: the quotas debited.
        decision: the limiter's answer (None when nothing was debited).
        actual: the actual cost once executed.
        refunded: what was given back after execution.
        error: the refusal to answer instead of running the operation.
        violation: the code of a static limit shadow mode let pass.
    """

    __slots__ = (
        "actual",
        "breakdown",
        "decision",
        "error",
        "header",
        "mode",
        "quotas",
        "refunded",
        "report",
        "span",
        "tenant",
        "tier",
        "violation",
    )

    def __init__(self, tenant: str, tier: TierConfig, mode: str, header: CostHeader | None) -> None:
        self.tenant = tenant
        self.tier = tier
        self.mode = mode
        self.header = header
        self.report: CostReport | None = None
        self.quotas: tuple[Quota, ...] = ()
        self.decision: Decision | None = None
        self.actual: float | None = None
        self.refunded = 0.0
        self.breakdown: dict[str, float] | None = None
        self.error: GraphQLError | None = None
        self.violation: str | None = None
        self.span: Any = None

    @property
    def cost(self) -> float:
        """The requested (estimated) cost."""
        return self.report.cost if self.report is not None else 0.0

    @property
    def debited(self) -> bool:
        """The cost was taken from the budget (a fail-open decision takes nothing)."""
        decision = self.decision
        return decision is not None and decision.allowed and decision.source != "fail_open"

    @property
    def outcome(self) -> str:
        """The ``decision`` label of this operation's metrics (``names.DECISIONS``)."""
        decision = self.decision
        if self.report is None:
            return names.REJECTED
        if decision is not None:
            if decision.source == "fail_open":
                return names.FAIL_OPEN
            if decision.source == "fail_closed":
                return names.FAIL_CLOSED
            if not decision.allowed:
                return names.BLOCKED if self.mode == "enforce" else names.SHADOW_BLOCKED
        return names.SHADOW_BLOCKED if self.violation else names.ALLOWED


_current: contextvars.ContextVar[Operation | None] = contextvars.ContextVar(
    "quotaql_operation", default=None
)


def current_operation() -> Operation | None:
    """The operation the extension is working on (for resolvers such as ``rateLimit``)."""
    return _current.get()


class _Reloader:
    """Reads the config file again when it changes, at most once per ``interval`` seconds."""

    def __init__(self, path: str, interval: float, loaded: Config, log: StructuredLog) -> None:
        self.log = log
        self.path = path
        self.interval = interval
        self._seen = self._stamp()
        self._next = time.monotonic() + interval
        self._lock = threading.Lock()
        self.config = loaded

    def _stamp(self) -> tuple[int, int] | None:
        try:
            stat = os.stat(self.path)
        except OSError:
            return None
        return stat.st_mtime_ns, stat.st_size

    def poll(self, schema: Any) -> Config | None:
        """A new valid config if the file changed since the last look, else None."""
        if self.interval <= 0 or time.monotonic() < self._next:
            return None
        if not self._lock.acquire(blocking=False):
            return None  # another thread is looking
        try:
            self._next = time.monotonic() + self.interval
            stamp = self._stamp()
            if stamp is None or stamp == self._seen:
                return None
            self._seen = stamp
            try:
                config = load_config(self.path)
                check_model(schema, config.cost.model)
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
            self.config = config
            self.interval = config.limits.reload_interval
            return config
        finally:
            self._lock.release()


class CostLimiter:
    """Cost-based rate limiting for a Strawberry schema: ``extensions=[CostLimiter(...)]``.

    Example:
        >>> import strawberry
        >>> @strawberry.type
        ... class Query:
        ...     @strawberry.field
        ...     def hello(self) -> str:
        ...         return "world"
        >>> schema = strawberry.Schema(query=Query, extensions=[CostLimiter()])
        >>> result = schema.execute_sync("{ hello }")
        >>> result.data, result.extensions["cost"]["requestedQueryCost"]
        ({'hello': 'world'}, 0.0)

    Args:
        config: the limiter's configuration (default: :func:`quotaql.config.default_config`).
        storage: where budgets live: a :class:`MemoryStorage` (default), a
            :class:`~quotaql.storage.redis.RedisStorage`, or an
            :class:`~quotaql.storage.redis.AsyncRedisStorage` (then only ``schema.execute``
            works, not ``execute_sync``).
        identify: ``identify(context) -> str | None``: the tenant of a request (default:
            :func:`default_identify`); None is the shared ``"anonymous"`` tenant.
        tier_resolver: ``tier_resolver(tenant, context) -> str | None``: the tenant's tier
            name, instead of the ``[tenants]`` table (None: the default tier).
        metrics: Prometheus metrics of every operation and decision.
        tracer_provider: an OpenTelemetry ``TracerProvider``: a ``quotaql.check`` span per
            operation (none at all without one).
        log: the rate-limited structured log (default: 5 records/s per event kind).
        recorder: another hook for the limiter's decisions, errors and breaker changes.
        breaker: the circuit breaker in front of the storage (default: opens after 3
            failures in a row or one timeout, probes again after 5 s).
        config_path: the file ``config`` came from, read again when it changes.
        quiet_strawberry: drop Strawberry's own log record of each refusal quotaql answers
            (a filter on the ``strawberry.execution`` logger): quotaql logs them itself,
            rate-limited, so that refused floods cannot flood the logs.
    """

    def __init__(
        self,
        config: Config | None = None,
        *,
        storage: Any = None,
        identify: Identify | None = None,
        tier_resolver: TierResolver | None = None,
        metrics: PrometheusMetrics | None = None,
        tracer_provider: Any = None,
        log: StructuredLog | None = None,
        recorder: Recorder | None = None,
        breaker: CircuitBreaker | None = None,
        config_path: str | os.PathLike[str] | None = None,
        quiet_strawberry: bool = True,
    ) -> None:
        self._config = config if config is not None else default_config()
        self.storage = storage if storage is not None else MemoryStorage()
        self.identify: Identify = identify or default_identify
        self.tier_resolver = tier_resolver
        self.is_async = inspect.iscoroutinefunction(getattr(self.storage, "acquire", None))
        self.metrics = metrics
        self.tracing = Tracing(tracer_provider) if tracer_provider is not None else None
        self.log = log if log is not None else StructuredLog()
        hooks = [hook for hook in (metrics, recorder) if hook is not None]
        logs = LogRecorder(self.log)
        limiter_class = AsyncLimiter if self.is_async else Limiter
        self.limiter: Limiter | AsyncLimiter = limiter_class(
            self.storage,
            on_backend_error=self._config.limits.on_backend_error,
            breaker=breaker,
            recorder=MultiRecorder(logs, *hooks) if hooks else logs,
        )
        self._reloader = (
            _Reloader(
                os.fspath(config_path), self._config.limits.reload_interval, self._config, self.log
            )
            if config_path is not None
            else None
        )
        self._checked_schema: Any = None
        if quiet_strawberry:
            logging.getLogger("strawberry.execution").addFilter(_OWN_REFUSALS)  # idempotent

    @classmethod
    def from_config(cls, path: str | os.PathLike[str], **kwargs: Any) -> CostLimiter:
        """A limiter configured by ``path`` (``quotaql.toml``), reloaded when it changes.

        Raises:
            ConfigError: the file is invalid (the error names the file, key and line).
        """
        return cls(load_config(path), config_path=path, **kwargs)

    @property
    def config(self) -> Config:
        """The configuration in force."""
        return self._config

    def __call__(self) -> SchemaExtension:
        """A fresh extension for one request (Strawberry calls this)."""
        limits = self._config.cost.limits
        if limits.max_tokens is not None or limits.max_length is not None:
            return _AsyncParsingExtension(self) if self.is_async else _SyncParsingExtension(self)
        return _AsyncExtension(self) if self.is_async else _SyncExtension(self)

    def check(self, schema: Any) -> None:
        """Check the cost model against ``schema`` (call at startup to fail early).

        Raises:
            ConfigError: a weight names a coordinate that is not in the schema.
        """
        check_model(schema, self._config.cost.model)
        self._checked_schema = schema

    # -- one operation -----------------------------------------------------------------

    def _refresh(self, schema: Any) -> None:
        if self._checked_schema is not schema:
            self.check(schema)
        if self._reloader is not None:
            config = self._reloader.poll(schema)
            if config is not None:
                self._config = config

    def _tier(self, tenant: str, context: Any) -> TierConfig:
        config = self._config
        if self.tier_resolver is None:
            return config.tier_of(tenant)
        try:
            name = self.tier_resolver(tenant, context)
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

    def _begin(self, ctx: ExecutionContext) -> Operation | None:
        """Price the operation and pick its quotas (none to debit: off, validate, refused).

        None when limiting is off for the caller (and no ``GraphQL-Cost`` header asks).
        """
        self._refresh(ctx.schema)
        config = self._config
        context = ctx.context
        header = _cost_header(context)
        try:
            who = self.identify(context)
        except Exception as error:  # a bug in identify() must not fail the request
            self.log.log(
                logging.ERROR,
                "identify_failed",
                "quotaql: identify() failed (%s: %s); the request counts as anonymous",
                type(error).__name__,
                error,
            )
            who = None
        tenant = str(who) if who else ANONYMOUS
        tier = self._tier(tenant, context)
        op = Operation(tenant, tier, tier.mode or config.limits.mode, header)
        document = ctx.graphql_document
        if document is None or (op.mode == "off" and header is None):
            return None
        _current.set(op)
        if self.tracing is not None:
            op.span = self.tracing.start()
        limits = config.cost.limits
        try:
            try:
                op.report = analyze(
                    ctx.schema,
                    document,  # Strawberry's parsed document: never parsed twice
                    ctx.variables,
                    ctx.operation_name,
                    config.cost.model,
                    limits,
                )
            except LimitExceeded as exceeded:
                if op.mode != "shadow":
                    raise
                op.violation = exceeded.code
                self._log_shadow(op, exceeded.code)
                op.report = analyze(
                    ctx.schema,
                    document,
                    ctx.variables,
                    ctx.operation_name,
                    config.cost.model,
                )
        except CostAnalysisError as error:
            op.error = _graphql_error(error)
            self._log_operation(op, names.REJECTED, "quotaql: rejected %s: %s", error.code, error)
            return op
        if header is not None:
            op.breakdown = op.report.by_coordinate
        if header == "validate":
            ctx.result = ExecutionResult(data=None)  # priced, not run, nothing debited
        elif op.mode != "off":
            chosen = op.tier if self.tier_resolver is not None else None
            op.quotas = config.quotas_for(tenant, ctx.operation_name, chosen)
        return op

    def _decided(self, ctx: ExecutionContext, op: Operation, decision: Decision) -> None:
        op.decision = decision
        response = _item(ctx.context, "response")
        if not decision.allowed:
            if op.mode == "enforce":
                error = rate_limit_error(decision)
                _set_headers(response, rate_limit_headers(decision, op.quotas))
                code = error_code(decision)
                _set_status(response, status_for(code, self._config.limits.http_status))
                self._log_operation(
                    op, names.BLOCKED, "quotaql: blocked %s: %s", code, error.message
                )
                op.error = error
                return
            self._log_shadow(op, error_code(decision))
        if op.span is not None and decision.source in ("fail_open", "fail_closed"):
            fail_open = decision.source == "fail_open"
            op.span.add_event(names.EVENT_FAIL_OPEN if fail_open else names.EVENT_FAIL_CLOSED)

    def _refund_amount(self, ctx: ExecutionContext, op: Operation) -> float:
        """After execution: the actual cost (when shown or refunded), and what to give back."""
        report, result = op.report, ctx.result
        document = ctx.graphql_document
        if report is None or document is None or op.header == "validate":
            return 0.0
        if report.operation_type == "subscription":
            return 0.0  # priced once, when it starts
        if op.decision is not None and not op.decision.allowed and op.mode == "enforce":
            return 0.0  # refused: nothing ran
        limits = self._config.limits
        refund = limits.refund_unused and op.debited
        if not (refund or limits.expose_cost or op.header is not None):
            return 0.0
        op.actual = actual_cost(
            ctx.schema,
            document,
            getattr(result, "data", None),
            ctx.variables,
            ctx.operation_name,
            self._config.cost.model,
        )
        return max(0.0, report.cost - op.actual) if refund else 0.0

    def _refunded(self, ctx: ExecutionContext, op: Operation, amount: float) -> None:
        op.refunded = amount
        if amount > 0 and op.span is not None:
            op.span.add_event(names.EVENT_REFUND, {"quotaql.refund": amount})
        decision = op.decision
        if decision is None:
            return
        if amount > 0:
            remaining = min(decision.limit, decision.remaining + amount)
            decision = op.decision = decision._replace(remaining=remaining)
        response = _item(ctx.context, "response")
        # A refusal has its headers already; shadow refusals get none.
        if decision.allowed and getattr(response, "headers", None) is not None:
            _set_headers(response, rate_limit_headers(decision, op.quotas))

    def _log_shadow(self, op: Operation, code: str) -> None:
        self._log_operation(
            op, names.SHADOW_BLOCKED, "quotaql: shadow mode would have blocked %s", code
        )

    def _log_operation(self, op: Operation, event: str, message: str, *args: object) -> None:
        """Log ``message % args`` about ``op`` with its tenant (hashed once), tier and cost."""
        fields = {"tenant": hashed_tenant(op.tenant), "tier": op.tier.name, "cost": op.cost}
        message += " (tenant %s, tier %s)"
        self.log.log(logging.INFO, event, message, *args, fields["tenant"], op.tier.name, **fields)

    def _finish(self, ctx: ExecutionContext, op: Operation | None) -> None:
        """Record the operation: metrics and its span."""
        if op is None or op.header == "validate":
            return
        report, decision = op.report, op.decision
        operation_type = report.operation_type if report else ctx.operation_type.value
        outcome = op.outcome
        if self.metrics is not None:
            self.metrics.operation(
                outcome,
                operation_type,
                op.tier.name,
                op.tenant,
                cost=report.cost if report else None,
                depth=report.depth if report else None,
                actual=op.actual,
                charged=report.cost if report and op.debited else 0.0,
                refunded=op.refunded,
            )
        span = op.span
        if span is not None:
            attributes: dict[str, Any] = {
                names.ATTR_OPERATION_TYPE: operation_type,
                names.ATTR_TENANT: hashed_tenant(op.tenant),
                names.ATTR_TIER: op.tier.name,
                names.ATTR_DECISION: outcome,
            }
            if ctx.operation_name:
                attributes[names.ATTR_OPERATION_NAME] = ctx.operation_name
            if report is not None:
                attributes[names.ATTR_COST_ESTIMATED] = report.cost
                attributes[names.ATTR_DEPTH] = report.depth
            if op.actual is not None:
                attributes[names.ATTR_COST_ACTUAL] = op.actual
            if decision is not None:
                attributes[names.ATTR_REMAINING] = decision.remaining
                attributes[names.ATTR_BACKEND] = decision.source
                if decision.retry_after:
                    attributes[names.ATTR_RETRY_AFTER] = decision.retry_after
            span.set_attributes(attributes)
            span.end()

    def _results(self, op: Operation | None) -> dict[str, Any]:
        if (
            op is None
            or op.report is None
            or (not self._config.limits.expose_cost and op.header is None)
        ):
            return {}
        restore = _restore_rate(op.quotas[0]) if op.quotas else None
        return {"cost": cost_extension(op.cost, op.actual, op.decision, restore, op.breakdown)}


def _graphql_error(error: CostAnalysisError) -> GraphQLError:
    return GraphQLError(str(error), extensions=error.extensions)


def _refuse(ctx: ExecutionContext, error: GraphQLError) -> None:
    """Answer ``error`` instead of running the operation."""
    if ctx.operation_type is OperationType.SUBSCRIPTION:
        raise error  # Strawberry does not look at ctx.result before subscribing
    ctx.result = ExecutionResult(data=None, errors=[error])


def _cost_header(context: Any) -> CostHeader | None:
    request = _item(context, "request")
    headers = getattr(request, "headers", None)
    if headers is None:
        return None
    value = str(headers.get("graphql-cost") or "").strip().lower()
    if value == "validate":
        return "validate"
    if value == "report":
        return "report"
    return None


def _restore_rate(quota: Quota) -> float:
    if quota.refill_per_second is not None:
        return float(quota.refill_per_second)
    return quota.maximum / float(quota.window_seconds or 1)


def _set_headers(response: Any, headers: dict[str, str]) -> None:
    target = getattr(response, "headers", None)
    if target is None:
        return
    for name, value in headers.items():
        target[name] = value


def _set_status(response: Any, status: int) -> None:
    if response is not None and hasattr(response, "status_code"):
        response.status_code = status


class _ExtensionBase(SchemaExtension):
    def __init__(self, owner: CostLimiter) -> None:
        super().__init__()
        self._owner = owner
        self._op: Operation | None = None

    def get_results(self) -> dict[str, Any]:
        return self._owner._results(self._op)


class _SyncExtension(_ExtensionBase):
    def on_execute(self) -> Iterator[None]:
        owner, ctx = self._owner, self.execution_context
        token = _current.set(None)
        op = None
        try:
            op = self._op = owner._begin(ctx)
            limiter = owner.limiter
            assert isinstance(limiter, Limiter)
            if op is not None and op.quotas and op.error is None:
                owner._decided(ctx, op, limiter.acquire(op.tenant, op.cost, op.quotas))
            if op is not None and op.error is not None:
                _refuse(ctx, op.error)
            yield
            if op is not None:
                amount = owner._refund_amount(ctx, op)
                if amount > 0:
                    limiter.refund(op.tenant, amount, op.quotas)
                owner._refunded(ctx, op, amount)
        finally:
            owner._finish(ctx, op)
            _current.reset(token)


def _parse_with_limits(self: _ExtensionBase) -> Iterator[None]:
    """``on_parse`` with parser limits set: parse here (once) so they answer with their codes."""
    ctx = self.execution_context
    limits = self._owner.config.cost.limits
    if ctx.graphql_document is None and ctx.query:
        try:
            ctx.graphql_document = parse_document(ctx.query, limits)
        except CostAnalysisError as error:
            raise _graphql_error(error) from None
    yield


class _AsyncExtension(_ExtensionBase):
    async def on_execute(self) -> AsyncIterator[None]:
        owner, ctx = self._owner, self.execution_context
        token = _current.set(None)
        op = None
        try:
            op = self._op = owner._begin(ctx)
            limiter = owner.limiter
            assert isinstance(limiter, AsyncLimiter)
            if op is not None and op.quotas and op.error is None:
                decision = await limiter.acquire(op.tenant, op.cost, op.quotas)
                owner._decided(ctx, op, decision)
            if op is not None and op.error is not None:
                _refuse(ctx, op.error)
            yield
            if op is not None:
                amount = owner._refund_amount(ctx, op)
                if amount > 0:
                    await limiter.refund(op.tenant, amount, op.quotas)
                owner._refunded(ctx, op, amount)
        finally:
            owner._finish(ctx, op)
            _current.reset(token)


# Without parser limits there is no on_parse hook at all: Strawberry runs only the hooks an
# extension defines, and each costs it some work on every request.
class _SyncParsingExtension(_SyncExtension):
    on_parse = _parse_with_limits


class _AsyncParsingExtension(_AsyncExtension):
    on_parse = _parse_with_limits
