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
import inspect
import logging
import math
import os
import random
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any, Self

from graphql import DocumentNode, GraphQLError, validate

from quotaql import web
from quotaql._flow import (
    Acquire,
    Await,
    Refund,
    ReleaseLease,
    TakeLease,
    drive,
    is_pending,
)
from quotaql.config import Config, TierConfig, default_config, load_config
from quotaql.contract import (
    IN_FLIGHT,
    IN_FLIGHT_SUBSCRIPTIONS,
    RATE_LIMITED,
    RATE_LIMITER_UNAVAILABLE,
    TOO_MANY_CONCURRENT,
    QuotaqlGraphQLError,
    cost_extension,
    error_code,
    graphql_error,
    rate_limit_error,
    status_for,
    too_many_concurrent_error,
    too_many_subscriptions_error,
    unknown_key_error,
)
from quotaql.cost_analysis import analyze
from quotaql.cost_analysis._compile import graphql_schema
from quotaql.cost_analysis.analyzer import parse_document
from quotaql.cost_analysis.screen import screen
from quotaql.errors import (
    CostAnalysisError,
    LimitExceeded,
)
from quotaql.gate import charges
from quotaql.gate.answer import BatchAnswers
from quotaql.gate.charges import SUBSCRIPTION_LEASES, TIER_LEASES
from quotaql.gate.delay import DelayLine
from quotaql.gate.operation import (
    CostHeader,
    Operation,
    current_operation,
    enter,
    operation_scope,
    operation_type,
)
from quotaql.gate.record import SHADOW_MESSAGE, OperationRecorder
from quotaql.gate.reload import Reloader, check_config
from quotaql.gate.scaling import Scaling
from quotaql.gate.slots import Slots
from quotaql.identity import Identity, Subject
from quotaql.instrumentation import names
from quotaql.instrumentation.logs import LogRecorder, StructuredLog
from quotaql.instrumentation.tracing import Tracing
from quotaql.limiter import AsyncLimiter, CircuitBreaker, Limiter, MultiRecorder
from quotaql.limiter.concurrency import ConcurrencyLimiter, Lease, Taken
from quotaql.limiter.deny import DenyCache
from quotaql.policy.quota import Decision
from quotaql.storage.leases import (
    LeaseKeeper,
    LeaseSpec,
    new_lease_id,
)
from quotaql.storage.memory import MemoryStorage
from quotaql.storage.redis import AsyncRedisStorage

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping, Sequence

    from graphql import ASTValidationRule

    from quotaql.adaptive import Adaptive
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

# What the address of a refused unknown key pays for the attempt: a key-guessing client
# runs down its own address's budget, nobody else's.
_REJECTED_KEY_CHARGE = 1.0

_Flow = Generator[Any, Any, Any]
# What an async flow is told of a failed step (an async hook's error: identity decides).
_HOOK_ERRORS = (Exception,)


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
        self.storage = storage if storage is not None else MemoryStorage()
        self.tier_resolver = tier_resolver
        self.is_async = inspect.iscoroutinefunction(getattr(self.storage, "acquire", None))
        self.metrics = metrics
        self.tracing = Tracing(tracer_provider) if tracer_provider is not None else None
        self.log = log if log is not None else StructuredLog()
        self._record = OperationRecorder(metrics, self.log)
        self._log = self._record.log_op
        self._scaling = Scaling(pressure, self._record)
        self._scaling.check(self._config)
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
        self._concurrency = ConcurrencyLimiter(
            self._config.limits.on_backend_error,
            self._config.limits.local_share,
            self.limiter.breaker,
            self._recorder,
            self._record,
        )
        if leases is not None:
            self._concurrency.use(leases)
        self._reloader = (
            Reloader(
                os.fspath(config_path),
                self._config.limits.reload_interval,
                self.log,
                self._scaling.check,
            )
            if config_path is not None
            else None
        )
        self._checked_schema: Any = None
        self._slots = Slots()
        self._delays = DelayLine(self._record, self._refund_all)
        self._denials = DenyCache(self._config.limits.deny_cache_size)
        self._responses = BatchAnswers()
        self._configured(self._config)

    @property
    def adaptive(self) -> Adaptive | None:
        """The adaptive limits' controller (None while ``[adaptive] mode`` is ``off``)."""
        return self._scaling.adaptive

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
        check_config(self._config, schema)
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
                    self._log(op, names.SHADOW_BLOCKED, SHADOW_MESSAGE, exceeded.code)
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
        self._responses.respond(op, response)

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
        span = self._record.finished(op, lease)
        if span is not None and releasing is None:
            span.end()
        elif releasing is not None:  # the release is on its way: the span ends when done
            self._concurrency.spawn(releasing, span)

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
            self._record.say_once(
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
        enter(op)
        op.schema, op.document, op.variables = schema, document, variables
        op.operation_name = operation_name
        if header == "validate" and operation_type(document, operation_name) == "subscription":
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
            self._scaling.admit(op, adaptive, config, report.operation_type != "subscription")
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
            self._delays.may_wait(op, config.limits, can_await)
        try:
            decision: Decision = yield Acquire(subject.key, charge, op.quotas, op.costs)
            self._decided(op, decision)
            if decision.delay > 0 and op.waits is True:  # allowed, at its turn
                yield from self._delays.wait(op, decision.delay, can_await, self.adaptive)
        except BaseException:  # closed by its driver: no operation for the adapter to finish
            self._free_slot(op)
            self._let_go(op)
            raise
        finally:
            self._delays.stop_waiting(op)
        if op.refused:  # refused: the subscription never opens, the lease goes back at once
            self._free_slot(op)
            lease = op.lease
            if lease is not None:
                op.lease = None
                yield ReleaseLease(lease, op)
            if decision.reason == "exceeds_capacity" and op.mode == "enforce":
                yield from self._charge_refusal(op)  # it can never run: as a static limit
        return op

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
        lease = new_lease_id()
        try:
            taken: Taken = yield TakeLease(key, specs, lease)
        except BaseException:  # closed while taking: it may have been taken, give it back
            if not self._concurrency.is_async:  # (async: once the take is answered)
                self._concurrency.release_later(
                    Lease(lease, key, tuple(spec.name for spec in specs), None, None, "", 0,
                           self._concurrency.store)
                )  # fmt: skip
            raise
        result = taken.result
        names_ = tuple(spec.name for spec in taken.specs)
        if result is None:  # the storage failed: open runs without a lease, closed refuses
            op.lease = Lease(lease, key, names_, None, None, op.tier.name, 0, taken.stray)
            self._concurrency.watch(op, op.lease)
            if self._concurrency.fail_mode != "closed" or op.mode != "enforce":
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
            keeper = self._concurrency.keeper_of(taken.leases)
            op.lease = Lease(lease, key, names_, taken.leases, keeper, op.tier.name, count,
                             taken.stray)  # fmt: skip
            self._concurrency.watch(op, op.lease)
            self._concurrency.held(op.tier.name, 1)
            return True
        if taken.stray is not None:  # refused by the local fallback: the stray take goes back
            self._concurrency.release_later(
                Lease(lease, key, names_, None, None, "", 0, taken.stray)
            )
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
            self._log(op, names.SHADOW_BLOCKED, SHADOW_MESSAGE, TOO_MANY_CONCURRENT)
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
            self._log(op, names.SHADOW_BLOCKED, SHADOW_MESSAGE, error_code(decision))
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
    ) -> Generator[Any, Any, tuple[Decision, tuple[Quota, ...], tuple[float, ...] | None] | None]:
        """Debit ``[limits] min_charge`` from the quotas a request pays before it is priced:
        the storage's decision, the quotas and their amounts; None when the minimum is 0."""
        config = self._config
        minimum = config.limits.min_charge
        if minimum <= 0:
            return None
        tier = op.tier if self.tier_resolver is not None else None
        multiplier = self._scaling.multiplier
        quotas, costs = charges.charges_for(config, op.subject, None, tier, minimum, multiplier)
        decision: Decision = yield Acquire(op.subject.key, minimum, quotas, costs)
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
                self._log(op, names.SHADOW_BLOCKED, SHADOW_MESSAGE, exceeded.code)
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
        multiplier = self._scaling.multiplier
        if multiplier < 1.0 and op.tier.name in config.adaptive_tiers:
            costs = charges.scaled(config.adaptive, (quota,), None, charge, multiplier)
        decision: Decision = yield Acquire(op.subject.key, charge, (quota,), costs)
        op.quotas, op.decision, op.charge = (quota,), decision, charge
        header = self._config.identity.api_key_header
        if op.mode != "enforce":
            self._log(op, names.SHADOW_BLOCKED, SHADOW_MESSAGE, "UNKNOWN_API_KEY")
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
                self._delays.refused(op, decision, waits)
            if op.mode == "enforce":
                if waits != names.DELAY_PROCESS_FULL:  # the next one may find a place
                    self._remember(op, decision)
                error = self._rate_limited(op, decision)
                self._log(op, names.BLOCKED, "quotaql: blocked %s: %s", code, error.message)
                return
            self._log(op, names.SHADOW_BLOCKED, SHADOW_MESSAGE, code)
        if op.span is not None and decision.source in ("fail_open", "fail_closed"):
            fail_open = decision.source == "fail_open"
            op.span.add_event(names.EVENT_FAIL_OPEN if fail_open else names.EVENT_FAIL_CLOSED)

    def _settle(self, op: Operation, data: Any, errors: Sequence[GraphQLError] | None) -> _Flow:
        amount, amounts = self._refund_amounts(op, data, errors)
        if amount > 0:
            yield Refund(op.subject.key, amount, op.quotas, amounts, op.decision)
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
        self._scaling.observe(op, errors)
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
                self._scaling.rescale(op, self._config, adaptive.multiplier)
        decision: Decision = yield Acquire(op.subject.key, op.charge, op.quotas, op.costs)
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
            self._log(op, names.SHADOW_BLOCKED, SHADOW_MESSAGE, error_code(decision))
            return None
        error = self._rate_limited(op, decision)
        self._log(op, names.BLOCKED, "quotaql: ended a subscription %s: %s", RATE_LIMITED,
                  error.message)  # fmt: skip
        return error

    # -- drivers: the same flow with plain calls, or awaited --------------------------------

    def _step(self, step: Any) -> Any:
        """Make one step of a flow: a limiter call or a lease (its result, or an awaitable
        of it), or an awaitable to wait for."""
        match step:
            case Acquire(key, amount, quotas, None):
                return self.limiter.acquire(key, amount, quotas)
            case Acquire(key, amount, quotas, costs):
                return self.limiter.acquire(key, amount, quotas, costs=costs)
            case Refund(key, amount, quotas, amounts, decision):  # of decision's debit
                return self.limiter.refund(key, amount, quotas, amounts=amounts,
                                           decision=decision)  # fmt: skip
            case TakeLease(key, specs, lease):
                return self._concurrency.take(key, specs, lease)
            case ReleaseLease(lease, owner):
                self._concurrency.unwatch(owner)
                return self._concurrency.give_back(lease)
            case Await(awaitable):
                return awaitable
        raise TypeError(f"quotaql: not a step of the gate's flows: {step!r}")

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
        return drive(flow, self._step)  # a sync flow never yields an awaitable

    async def _drive_async(self, flow: _Flow) -> Any:
        """Run ``flow`` on an event loop: a hook's or a storage's failure is raised inside
        the flow, for it to decide."""
        value = drive(flow, self._step, _HOOK_ERRORS)
        return await value if is_pending(value) else value

    # -- concurrency leases ----------------------------------------------------------------

    def _refund_all(self, op: Operation) -> None:
        """Give ``op``'s whole debit back without waiting (a closing flow cannot await)."""
        # Only a storage's decision has a turn to wait for: it goes back where it was made.
        done = self._step(Refund(op.subject.key, op.charge, op.quotas, op.costs, op.decision))
        if inspect.iscoroutine(done):
            self._concurrency.spawn(done)

    def _release(self, op: Operation, *, end_span: bool = False) -> Any:
        """Give ``op``'s lease back now: None when done, or a coroutine that does it (async
        lease storage; with ``end_span``, it ends ``op``'s span once done)."""
        lease = op.lease
        if lease is None:
            return None
        op.lease = None
        self._concurrency.unwatch(op)
        return self._concurrency.give_back(lease, op.span if end_span else None)

    def _let_go(self, op: Operation) -> None:
        """``op``'s flow is being closed (its client left): its lease goes back."""
        lease = op.lease
        if lease is not None:
            op.lease = None
            self._concurrency.unwatch(op)
            self._concurrency.release_later(lease)

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
        return self._concurrency.in_flight()

    @property
    def lease_keepers(self) -> tuple[LeaseKeeper, ...]:
        """The keepers renewing the leases this process holds (one per lease storage and
        ``lease_ttl``; none before the first lease): ``len(keeper)`` is what each renews."""
        return self._concurrency.keepers

    @property
    def leases(self) -> Leases | AsyncLeases | None:
        """Where the concurrency leases live (None until a tier has a concurrency limit)."""
        leases: Leases | AsyncLeases | None = self._concurrency.store
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
        releasing = [task for task in self._concurrency.releasing if task.get_loop() is loop]
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
        self._scaling.configure(config)
        limited = any(charges.in_flight(tier) is not None for tier in config.tiers.values())
        if not self._concurrency.configure(config.limits.lease_ttl, limited, self.storage):
            self._record.say_once(
                "leases_in_memory",
                f"quotaql: the {type(self.storage).__name__} storage has no lease storage of its"
                " own: the concurrency limits (max_in_flight) are counted in this process's"
                " memory, per process; pass Gate(leases=...) to share them",
            )
        if config.identity.unknown_keys == "tenant":
            self._record.say_once(
                "unknown_keys_tenant",
                'quotaql: [identity] unknown_keys = "tenant": every API key is a tenant of its'
                " own, so a client that sends a new key each time gets a new budget each"
                " time; do not use it on a public API (docs/identity.md)",
                logging.WARNING,
            )

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
