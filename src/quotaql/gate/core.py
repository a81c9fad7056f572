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
import os
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any, Unpack

from graphql import DocumentNode, GraphQLError

from quotaql import web
from quotaql._flow import (
    Acquire,
    Await,
    Charge,
    Refund,
    ReleaseLease,
    TakeLease,
    drive,
    is_pending,
)
from quotaql.config import Config, default_config, load_config
from quotaql.contract import (
    RATE_LIMITED,
    error_code,
    too_many_subscriptions_error,
)
from quotaql.cost_analysis._compile import graphql_schema
from quotaql.gate import advice, charges, staging, startup, worktime
from quotaql.gate.answer import BatchAnswers, extensions
from quotaql.gate.candidate import Candidate
from quotaql.gate.delay import DelayLine
from quotaql.gate.documents import Documents
from quotaql.gate.holdings import Holdings
from quotaql.gate.operation import (
    CostHeader,
    Operation,
    Outcome,
    enter,
    operation_type,
)
from quotaql.gate.pricing import price, repriced
from quotaql.gate.record import OperationRecorder, watch
from quotaql.gate.refusals import Refusals
from quotaql.gate.reload import Reloader, check_config
from quotaql.gate.scaling import Scaling
from quotaql.gate.settle import settling
from quotaql.gate.skipping import Skipping, unskipped
from quotaql.gate.tiers import TierResolver, resolve_tier
from quotaql.identity import Identity, Subject
from quotaql.instrumentation import names
from quotaql.instrumentation.logs import LogRecorder, StructuredLog
from quotaql.instrumentation.tracing import Tracing
from quotaql.limiter import AsyncLimiter, CircuitBreaker, Limiter, MultiRecorder
from quotaql.limiter.concurrency import ConcurrencyLimiter
from quotaql.policy.modes import Mode
from quotaql.storage.memory import MemoryStorage

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping, Sequence

    from graphql import ASTValidationRule

    from quotaql.adaptive import Adaptive
    from quotaql.config import TierConfig
    from quotaql.gate.options import AdmitOptions, FromConfigOptions
    from quotaql.instrumentation.metrics import PrometheusMetrics
    from quotaql.limiter import Recorder
    from quotaql.policy.quota import Decision
    from quotaql.storage.leases import AsyncLeases, LeaseKeeper, Leases

    Variables = Mapping[str, Any] | None  # a request's raw JSON variables

__all__ = ["Gate"]


_Flow = Generator[Any, Any, Any]
# Refused for want of a waiting place, not by the storage: not kept by the deny cache.
_NO_PLACE = frozenset({names.DELAY_PROCESS_FULL, names.DELAY_SUBJECT_FULL})
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
        self._record = OperationRecorder(metrics, self.log, resolved=key_resolver is not None)
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
            watch(metrics, self.limiter, self.identity if key_resolver is not None else None)
        self._concurrency = ConcurrencyLimiter(self.limiter, self._record)
        if leases is not None:
            self._concurrency.use(leases)
        self._reloader: Reloader | None = None
        self._candidate = Candidate(self._record)  # candidate weights, priced on a sample
        if config_path is not None:
            interval, path = self._config.limits.reload_interval, os.fspath(config_path)
            looks = self._candidate.poll  # the candidate file, looked at with this one
            self._reloader = Reloader(path, interval, self.log, self._scaling.check, looks)
        self._checked_schema: Any = None
        self._ledger = worktime.Ledger()  # worker time owed, not charged yet
        self._delays = DelayLine(self._record, self._refund_all)
        self._refusals = Refusals(self._record, self._scaling, tier_resolver is not None)
        self._documents = Documents(self._refusals, self._log)
        self._holdings = Holdings(self._concurrency, self._record, self._refusals.refuse)
        self._responses = BatchAnswers()
        self._skipping = Skipping(self._record)  # partial answers (on_field_limit = "skip")
        self._configured(self._config)
        startup.check(self.storage, metrics)  # an evicting Redis: no start

    @property
    def adaptive(self) -> Adaptive | None:
        """The adaptive limits' controller (:class:`quotaql.adaptive.Adaptive`); None: off."""
        return self._scaling.adaptive

    @classmethod
    def from_config(
        cls, path: str | os.PathLike[str], **options: Unpack[FromConfigOptions]
    ) -> Gate:
        """A gate configured by ``path`` (``quotaql.toml``), reloaded when it changes.

        Raises:
            ConfigError: the file is invalid (the error names the file, key and line).
        """
        return cls(load_config(path), config_path=path, **options)

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
        if self._reloader is not None:  # a schema to check new files against: look on a timer
            self._reloader.start(self, Gate._reload_tick)
        advice.schema(self._record, self._config, schema)

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
        the document to admit, or the errors to answer with. A document that passed both
        is not checked again (per schema and rules: :meth:`known`).

        For servers that parse themselves (plain graphql-core, Graphene). Give the
        operation :meth:`begin` made: a subject refused a moment ago is answered its
        refusal without parsing anything, and a shadow-mode tier's document is not refused
        by the static pass. The errors: ``GRAPHQL_PARSE_FAILED``, ``QUERY_TOO_LARGE``
        (``max_tokens``, ``max_length``), ``QUERY_TOO_DEEP``, ``TOO_MANY_ALIASES``,
        ``TOO_MANY_FIELDS``, ``TOO_MANY_DIRECTIVES``, ``TOO_MANY_ROOT_FIELDS``, and
        graphql-core's validation errors (:meth:`admit` charges ``[limits] min_charge``).
        """
        return self._documents.parse(self._config, schema, query, rules, op)

    def screen(self, op: Operation | None, document: DocumentNode) -> GraphQLError | None:
        """The static pass: ``document``'s shape against the ``[cost]`` limits (depth,
        aliases, root fields, fields, repeated fields, directives), before validation.

        Cheap and bounded (it stops at the first limit crossed), so that a hostile
        document is refused before graphql-core's validation, whose overlapping-fields rule
        is quadratic. A shadow-mode ``op`` is not refused: the violation is logged and
        counted. Returns the refusal to answer, or None.
        """
        found = self._documents.screen(self._config, op, document)
        return found if isinstance(found, GraphQLError) else None

    def validate(self, op: Operation | None, schema: Any, document: DocumentNode,
                 rules: Collection[type[ASTValidationRule]] | None = None,
                 validator: Callable[..., list[GraphQLError]] | None = None,
                 ) -> list[GraphQLError]:  # fmt: skip
        """The static pass, then validation (``validator(schema, document, rules)``,
        graphql-core's ``validate`` by default), unless ``document`` passed both before
        (:meth:`known`): the errors to answer, the static pass's refusal first."""
        return self._documents.check(self._config, op, graphql_schema(schema), document,
                                     rules, validator)  # fmt: skip

    def known(self, op: Operation | None, schema: Any, document: DocumentNode,
              rules: Collection[type[ASTValidationRule]] | None = None) -> bool:  # fmt: skip
        """Whether ``document`` passed the static pass (under the limits in force) and
        validated against ``schema`` with ``rules`` before: then it needs neither again
        (``op`` counts as screened). For an adapter's validation hook."""
        return self._documents.known(self._config, op, graphql_schema(schema), document, rules)

    def checked(self, op: Operation | None, schema: Any, document: DocumentNode,
                rules: Collection[type[ASTValidationRule]] | None = None) -> None:  # fmt: skip
        """``document`` validated without an error: :meth:`known` from now on (if screened)."""
        self._documents.checked(self._config, op, graphql_schema(schema), document, rules)

    def parse_document(self, query: str, *, op: Operation | None = None) -> DocumentNode:
        """``query`` parsed within the ``[cost]`` parser limits, for an adapter's parse hook;
        ``op`` (:meth:`begin`'s) pays its length (``chars_per_point``), parsed or not.

        Raises:
            GraphQLError: the error to answer (``GRAPHQL_PARSE_FAILED``, ``QUERY_TOO_LARGE``,
                ``QUERY_TOO_DEEP``), raised by quotaql (``QuotaqlGraphQLError``).
        """
        return self._documents.parse_document(self._config, query, op)

    def open_subscriptions(self) -> int:
        """How many subscriptions this process holds open (the gauge's value)."""
        return self._holdings.open_subscriptions()

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
        storage call (a parse hook cannot await): :meth:`reject` or :meth:`admit` charges it."""
        if op.error is None:
            self._refusals.failed(op, errors)

    def reject(self, op: Operation, errors: Sequence[GraphQLError]) -> None:
        """``op``'s document was refused before it could be priced (it did not parse or
        validate: ``errors``): answer them, and charge ``[limits] min_charge``."""
        self._drive(self._reject(op, errors))

    async def reject_async(self, op: Operation, errors: Sequence[GraphQLError]) -> None:
        """:meth:`reject` on an event loop."""
        await self._drive_async(self._reject(op, errors))

    def admit(self, schema: Any, document: Any, variables: Variables = None,
              operation_name: str | None = None,
              **options: Unpack[AdmitOptions]) -> Operation:  # fmt: skip
        """Identify, price and debit one operation; its :attr:`Operation.error` says if it
        must not run.

        Every request pays at least ``[limits] min_charge``, or its document's length over
        ``[cost] chars_per_point`` when more: one that does not parse or validate, or that
        the static limits refuse, pays that much only; one refused for lack of budget, nothing.

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
        flow = self._admit(schema, document, variables, operation_name, options, False)
        admitted: Operation = self._drive(flow)
        charging = worktime.admitted(admitted, self._ledger)
        if charging is not None:
            self._drive(charging)
        return admitted

    async def admit_async(self, schema: Any, document: Any, variables: Variables = None,
                          operation_name: str | None = None,
                          **options: Unpack[AdmitOptions]) -> Operation:  # fmt: skip
        """:meth:`admit` on an event loop: storage calls and async hooks are awaited."""
        flow = self._admit(schema, document, variables, operation_name, options, True)
        admitted: Operation = await self._drive_async(flow)
        charging = worktime.admitted(admitted, self._ledger)
        if charging is not None:
            await self._drive_async(charging)
        return admitted

    def settle(
        self, op: Operation, data: Any, errors: Sequence[GraphQLError] | None = None
    ) -> None:
        """After execution: count the actual cost from ``data``, refund what was unused, or
        charge what it ran above its debit (its overage, ``[limits] charge_overage``).

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
        self._responses.respond(op, response)

    def results(self, op: Operation | None) -> dict[str, Any]:
        """The response's ``extensions``: ``{"cost": ...}`` (empty when not exposed)."""
        return extensions(op, self._config.limits.expose_cost)

    def finish(self, op: Operation | None) -> None:
        """Record the operation (metrics, its span) and free its subscription slot; once."""
        if op is None or op.finished:
            return
        op.finished = True
        work = op.work
        if work.phase is not None or work.running is not None:  # (settling closed both)
            worktime.stop(work)
            worktime.ran(work)
        self._holdings.free_slot(op)
        self._candidate.finished(op)  # a sampled one priced with the candidate, its span open
        lease = op.lease
        releasing = None if lease is None else self._holdings.release(op, end_span=True)
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
        tier = resolve_tier(config, self.tier_resolver, subject, context, self.log)
        sent = _cost_header(request)
        header = _known_header(sent)
        op = staging.operation(config, subject, tier, header)  # the mode: enforce_share
        op.time = charges.time_quota(config, tier) if op.mode is not Mode.OFF else None
        if sent is not None and header is None and op.mode is not Mode.OFF:
            self._refusals.bad_header(op, sent)
        if op.mode is Mode.OFF and header is None:
            return op
        if self.tracing is not None:
            op.span = self.tracing.start()
        if op.mode is Mode.ENFORCE:
            self._refusals.deny_unparsed(op)  # even the cheapest request would be refused
        return op

    def _admit(
        self,
        schema: Any,
        document: Any,
        variables: Variables,
        operation_name: str | None,
        options: AdmitOptions,
        can_await: bool,
    ) -> _Flow:
        self._refresh(schema)
        config = self._config
        op = options.get("op")
        if op is None:
            context, request = options.get("context"), options.get("request")
            op = yield from self._begin(context, request, can_await)
        if op.error is not None:  # denied, or refused before pricing (charged once)
            if op.failed:
                yield from self._refusals.charge_minimum(op)
            return op
        if isinstance(document, list):  # what parse() refused
            if document:
                yield from self._reject(op, document)
            return op
        header = op.header
        if document is None or (op.mode is Mode.OFF and header is None):
            return op
        enter(op)
        if not op.chars:  # its text's length: the least it pays (chars_per_point)
            op.chars = charges.text_length(document, config.cost.limits.max_length)
        op.schema, op.document, op.variables = schema, document, variables
        op.operation_name = operation_name
        if header == "validate" and operation_type(document, operation_name) == "subscription":
            # A subscription always runs (its stream is not a result a header can replace):
            # priced and debited like any other, with the breakdown "validate" asked for.
            op.header = header = "report"
            op.outcome = Outcome.SHADOW_BLOCKED if op.violation else Outcome.ALLOWED
        subject = op.subject
        if subject.rejected and op.mode is not Mode.OFF:
            yield from self._refusals.reject_key(op)  # before any pricing: guessing keys is cheap
            if op.refused:
                return op
        worktime.start(op.work)  # pricing (and the static pass): its worker time
        if not op.screened and isinstance(document, DocumentNode):
            self.screen(op, document)  # a document the adapter did not screen
        priced = not op.refused and price(op, schema, document, variables, operation_name,
                                          config.cost, self._log)  # fmt: skip
        worktime.stop(op.work)
        if not priced:
            yield from self._refusals.charge_minimum(op)
            return op
        report = op.report
        assert report is not None  # priced
        if header is not None:
            op.breakdown = report.by_coordinate
        if op.mode is Mode.OFF:
            return op  # priced, not limited: nothing debited
        if header == "validate":
            op.warnings = charges.beyond_capacity(config, op, report, self._resolved(op))
            yield from self._refusals.charge_minimum(op)  # priced, not run: it pays the minimum
            return op
        charges.debit(config, op, report, self._resolved(op))
        adaptive = self.adaptive
        if adaptive is not None:
            self._scaling.admit(op, adaptive, report.operation_type != "subscription")
        if op.mode is Mode.ENFORCE and self._refusals.deny_priced(op):
            return op  # no cheaper than what was refused, before its time
        subscription = report.operation_type == "subscription"
        if subscription:
            limit = config.limits.max_subscriptions
            if not self._holdings.take_slot(op, limit if op.mode is Mode.ENFORCE else None):
                op.refuse(too_many_subscriptions_error(limit or 0))  # a websocket: no status
                op.outcome = Outcome.TOO_MANY_SUBSCRIPTIONS
                self._log(op, names.TOO_MANY_SUBSCRIPTIONS)
                return op
        if charges.in_flight(op.tier) is not None and not (
            yield from self._holdings.lease_first(op, report)
        ):
            return op  # a concurrency limit: the lease first, so that a refusal debits nothing
        if op.tier.delays and not subscription:
            self._delays.may_wait(op, config.limits, can_await)
        try:
            # The time quota checked too, when due (once a second, or after a charge).
            decision: Decision = yield worktime.acquire(op, ledger=self._ledger)
            decision = worktime.points(decision, op, self._ledger)
            if not decision.allowed and config.limits.on_field_limit == "skip":
                decision = yield from self._skipping.skip(config, op, decision, self._ledger)
            self._decided(op, decision)
            if decision.delay > 0 and op.waits is True:  # allowed, at its turn
                yield from self._delays.wait(op, decision.delay, can_await, self.adaptive)
        except BaseException:  # closed by its driver: no operation for the adapter to finish
            self._holdings.free_slot(op)
            self._holdings.let_go(op)
            raise
        finally:
            self._delays.stop_waiting(op)
        if op.refused:  # refused: the subscription never opens, the lease goes back at once
            self._holdings.free_slot(op)
            lease = op.lease
            if lease is not None:
                op.lease = None
                yield ReleaseLease(lease, op)
            if decision.reason == "exceeds_capacity" and op.mode is Mode.ENFORCE:
                yield from self._refusals.charge_refusal(op)  # it can never run: as a static limit
        return op

    def _reject(self, op: Operation, errors: Sequence[GraphQLError]) -> _Flow:
        """Refused before pricing: answer ``errors``, charge the minimum."""
        if op.error is None:
            self._refusals.failed(op, errors)
        if op.failed:
            yield from self._refusals.charge_minimum(op)
        yield from worktime.charge(op, self._ledger)

    def _resolved(self, op: Operation) -> TierConfig | None:
        """``op``'s tier when a ``tier_resolver`` chose it (its quotas are its tier's)."""
        return op.tier if self.tier_resolver is not None else None

    def _decided(self, op: Operation, decision: Decision) -> None:
        op.decided(decision)
        self._candidate.decided(op, decision)
        if not decision.allowed:
            code = error_code(decision)
            waits = op.waits
            if waits is not None and decision.reason == "rate_limited":
                self._delays.refused(op, decision, waits)
            if op.mode is Mode.ENFORCE:
                if waits not in _NO_PLACE:  # the next one may find a place
                    self._refusals.remember(op, decision)
                self._refusals.rate_limited(op, decision)
                self._log(op, names.BLOCKED, code)
                return
            self._log(op, names.SHADOW_BLOCKED, code)
        if op.span is not None and decision.source in ("fail_open", "fail_closed"):
            fail_open = decision.source == "fail_open"
            op.span.add_event(names.EVENT_FAIL_OPEN if fail_open else names.EVENT_FAIL_CLOSED)

    def _settle(self, op: Operation, data: Any, errors: Sequence[GraphQLError] | None) -> _Flow:
        data, errors = unskipped(op, data, errors)  # a skipped field: not run, not charged
        self._scaling.observe(op, errors)  # one sample of the signal, once
        sample = self._config.cost.tuning_sample if self.metrics is not None else 0.0
        yield from settling(op, data, errors, self._config.limits, sample, self._ledger)

    def _event(self, op: Operation) -> _Flow:
        op.events += 1
        if op.events == 1 or op.mode is Mode.OFF or not op.quotas or op.error is not None:
            return None  # the first event was paid when the subscription started
        report, config = op.report, self._config
        if op.events == 2 and report is not None:  # its document's size was paid once
            charges.event_price(config, op, report, self._resolved(op))
            op.priced = config
        elif op.priced is not config and report is not None:  # reloaded: the new weights
            report = op.report = repriced(op, config.cost, report)
            charges.event_price(config, op, report, self._resolved(op), reloaded=True)
            op.priced = config
        adaptive = self.adaptive
        if adaptive is not None:
            adaptive.poll()
            multiplier = adaptive.multiplier_for(op.subject.key)
            if multiplier != op.multiplier:
                self._scaling.rescale(op, multiplier)
        decision: Decision = yield Acquire(op.subject.key, op.charge, op.quotas, op.costs)
        if self.metrics is not None:
            outcome = names.ALLOWED if decision.allowed else names.BLOCKED
            if not decision.allowed and op.mode is not Mode.ENFORCE:
                outcome = names.SHADOW_BLOCKED
            charged = op.charge if decision.allowed and decision.source != "fail_open" else 0.0
            self.metrics.event(outcome, op.tier.name, charged, op.staged)
        if decision.allowed:
            op.decided(decision)  # what the subscriber has left now
            return None
        if op.mode is not Mode.ENFORCE:
            self._log(op, names.SHADOW_BLOCKED, error_code(decision))
            return None
        error = self._refusals.rate_limited(op, decision)
        self._log(op, names.BLOCKED, RATE_LIMITED)
        return error

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
            case Charge(key, amount, quotas, amounts, decision):  # over decision's debit
                return self.limiter.charge(key, amount, quotas, amounts=amounts,
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

    def in_flight(self) -> dict[str, int]:
        """The leases this process holds now, per tier (the ``quotaql_in_flight`` gauge)."""
        return self._concurrency.in_flight()

    @property
    def lease_keepers(self) -> tuple[LeaseKeeper, ...]:
        """The keepers renewing this process's leases (one per lease storage and lease_ttl)."""
        return self._concurrency.keepers

    @property
    def leases(self) -> Leases | AsyncLeases | None:
        """Where the concurrency leases live (None until a tier has a concurrency limit)."""
        leases: Leases | AsyncLeases | None = self._concurrency.store
        return leases

    # -- shutdown -----------------------------------------------------------------------------

    async def astart(self) -> None:
        """At start-up on an event loop (:class:`quotaql.asgi.Lifespan` calls it): raise
        ``EvictionRefused`` if the storage's Redis may evict quotaql's keys and ``[redis]
        allow_eviction`` does not allow it (a sync storage was checked at construction)."""
        await startup.check_async(self.storage)

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

    def _refresh(self, schema: Any) -> None:
        if self._checked_schema is not schema:
            self.check(schema)
        reloader = self._reloader
        if reloader is not None and not reloader.running:  # no thread: requests look
            self._reload(reloader.poll(schema, self._config))

    def _reload_tick(self) -> None:
        """The reload thread's look at the file, once a schema was seen (to check it on)."""
        schema, reloader = self._checked_schema, self._reloader
        if schema is not None and reloader is not None:
            self._reload(reloader.poll(schema, self._config, due=True))

    def _reload(self, config: Config | None) -> None:
        if config is not None:
            self._config = config
            self._configured(config)

    def _configured(self, config: Config) -> None:
        """Set up what ``config`` asks of the gate itself; say once what is unsafe in it."""
        self._scaling.configure(config)
        startup.configure(self.storage, config)
        self._refusals.configure(config)
        self._holdings.configure(config.limits)
        self._candidate.configure(config)
        limited = any(charges.in_flight(tier) is not None for tier in config.tiers.values())
        configured = self._concurrency.configure(config.limits.lease_ttl, limited, self.storage)
        leases = self._concurrency.store
        if self.metrics is not None and hasattr(leases, "overflowed_shared"):  # past max_keys
            self.metrics.watch_overflow(leases, names.STORE_LEASES)
        advice.configuration(self._record, config, self.storage, configured)
        reloader = self._reloader
        if reloader is not None and self.metrics is not None:  # which file runs, per worker
            self.metrics.config_loaded(reloader.generation, reloader.digest)


def _cost_header(request: Any) -> str | None:
    """The ``GraphQL-Cost`` header, trimmed and lower-cased (None: not sent)."""
    value = web.header(request, "graphql-cost")
    return None if value is None else value.strip().lower()


def _known_header(value: str | None) -> CostHeader | None:
    """``value`` if quotaql knows it (``validate``, ``report``), else None."""
    if value == "validate":
        return "validate"
    if value == "report":
        return "report"
    return None
