"""One operation as the gate works it out (:class:`Operation`), and the operation a
resolver runs in (:func:`current_operation`)."""

from __future__ import annotations

import contextlib
import contextvars
import math
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal, Protocol

from graphql import DocumentNode, GraphQLError

from quotaql.contract import (
    TOO_MANY_CONCURRENT,
    rate_limit_headers,
)
from quotaql.cost_analysis.analyzer import select_operation
from quotaql.errors import CostAnalysisError
from quotaql.gate import warn
from quotaql.instrumentation import names
from quotaql.policy.modes import Mode

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

    from quotaql.config import Config, TierConfig
    from quotaql.cost_analysis import CostReport
    from quotaql.gate.warn import Caution
    from quotaql.identity import Subject
    from quotaql.limiter.concurrency import Lease
    from quotaql.policy.quota import Decision, Quota

__all__ = [
    "CostHeader",
    "Operation",
    "Outcome",
    "SkippedFields",
    "Work",
    "close_scope",
    "concurrency_wait",
    "current_operation",
    "enter",
    "open_scope",
    "operation_scope",
    "operation_type",
]

#: What the ``GraphQL-Cost`` request header asks: price without running, or add a breakdown.
CostHeader = Literal["validate", "report"]


class Outcome(StrEnum):
    """What became of an operation: the ``decision`` label of its metrics and span."""

    ALLOWED = names.ALLOWED
    BLOCKED = names.BLOCKED
    SHADOW_BLOCKED = names.SHADOW_BLOCKED
    REJECTED = names.REJECTED  # did not parse, validate or pass the static limits
    DENIED = names.DENIED  # refused from the deny cache
    FAIL_OPEN = names.FAIL_OPEN
    FAIL_CLOSED = names.FAIL_CLOSED
    VALIDATED = names.VALIDATED  # priced, not run (GraphQL-Cost: validate)
    UNKNOWN_KEY = names.UNKNOWN_KEY
    TOO_MANY_SUBSCRIPTIONS = names.TOO_MANY_SUBSCRIPTIONS
    TOO_MANY_CONCURRENT = names.TOO_MANY_CONCURRENT


class SkippedFields(Protocol):
    """What :attr:`Operation.skipped` holds: :class:`quotaql.gate.skipping.Skipped`."""

    keys: list[str]
    seen: set[str]
    errors: dict[str, GraphQLError]

    def error(self, info: Any) -> GraphQLError | None: ...

    def headers(self, decision: Decision, quotas: Sequence[Quota]) -> dict[str, str]: ...


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
        outcome: what became of it (:class:`Outcome`: the ``decision`` label of its
            metrics), set where it is decided.
        actual: the actual cost once executed.
        sizes: the lists the response held, ``(coordinate, assumed, returned, sliced)``,
            when this operation was sampled for tuning (``[cost] tuning_sample``).
        refunded: what was given back after execution.
        overage: what was charged after execution above the debit (the actual cost ran
            over it: ``[limits] charge_overage``).
        error: the refusal to answer instead of running the operation.
        violation: the code of a static limit shadow mode let pass.
        events: subscription events delivered so far.
        charge: what was debited (the cost, or the least it pays when more).
        chars: the length of its document's text (0 while unknown): what it pays at
            least is that over ``[cost] chars_per_point`` (its parse's work).
        least: the least it was charged (``min_charge``, or its size when more): what a
            refund never goes below.
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
        time: the time quota its worker time is charged to (None: none, or mode ``off``).
        work: its worker time (:class:`~quotaql.gate.worktime.Work`): what was measured,
            and the phases open now.
        staged: for a subject of an ``enforce`` tier whose ``enforce_share`` is below 1,
            ``"enforced"`` (in the share) or ``"shadow"`` (outside it: ``mode`` is shadow
            because of the share, :mod:`quotaql.gate.staging`); None otherwise.
        skipped: the root fields it runs without, their quotas having refused (``[limits]
            on_field_limit = "skip"``, :mod:`quotaql.gate.skipping`); None: none.
        warn_at: where its tier's warning starts (``Config.warn_at_of``; None: none), from
            the configuration it was begun under.
        caution: its ``warn_at`` warning (:mod:`quotaql.gate.warn`), with the decision it
            was worked out for.
        cost_names: the names of the cost headers (``[limits] cost_headers``; None: off).
    """

    __slots__ = (
        "__weakref__",
        "actual",
        "base",
        "breakdown",
        "caution",
        "charge",
        "chars",
        "clean",
        "cost_names",
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
        "least",
        "mode",
        "more",
        "multiplier",
        "operation_name",
        "outcome",
        "overage",
        "paid_minimum",
        "priced",
        "quotas",
        "refunded",
        "report",
        "schema",
        "screened",
        "sizes",
        "skipped",
        "slot",
        "span",
        "staged",
        "started",
        "status",
        "subject",
        "tier",
        "time",
        "variables",
        "violation",
        "waits",
        "warn_at",
        "warnings",
        "work",
    )

    def __init__(
        self,
        subject: Subject,
        tier: TierConfig,
        mode: Mode,
        header: CostHeader | None,
        config: Config | None = None,
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
        self.overage = 0.0
        self.breakdown: dict[str, float] | None = None
        self.error: GraphQLError | None = None
        self.more: tuple[GraphQLError, ...] = ()
        self.violation: str | None = None
        self.span: Any = None
        self.events = 0
        self.priced: Any = None  # the Config a subscription's events are priced under
        self.warnings: list[dict[str, Any]] | None = None  # extensions.warnings
        # warn_at's warning for the decision it was worked out for (gate/warn.py)
        self.caution: tuple[Decision, Caution | None] | None = None
        limits = config.limits if config is not None else None
        self.warn_at = config.warn_at_of(tier) if config is not None else None
        self.cost_names = limits.cost_header_names if limits and limits.cost_headers else None
        self.slot = False  # holds one of the subject's subscription slots
        self.status: int | None = None
        self.schema: Any = None
        self.document: Any = None
        self.variables: Mapping[str, Any] | None = None
        self.operation_name: str | None = None
        self.charge = 0.0
        self.chars = 0
        self.least = 0.0
        self.paid_minimum = False  # refused, and charged min_charge for it
        self.denied = False
        self.failed = False
        self.screened = False
        self.clean = False  # the static pass found nothing (the document may be kept)
        self.finished = False
        self.multiplier = 1.0
        self.base: tuple[float, ...] | None = None
        self.started: float | None = None
        self.lease: Lease | None = None
        self.waits: bool | str | None = None
        self.time: Quota | None = None
        self.work = Work()
        self.staged: Literal["enforced", "shadow"] | None = None
        self.skipped: SkippedFields | None = None  # root fields it runs without (on_field_limit)
        self.outcome = Outcome.VALIDATED if header == "validate" else Outcome.ALLOWED

    def decided(self, decision: Decision) -> None:
        """The limiter decided ``op``'s debit: refused (or, in shadow mode, would have
        been), or allowed (failing open, or in shadow mode past a limit it crossed)."""
        self.decision = decision
        if not decision.allowed:
            self.outcome = (
                Outcome.FAIL_CLOSED
                if decision.source == "fail_closed"
                else Outcome.BLOCKED
                if self.mode is Mode.ENFORCE
                else Outcome.SHADOW_BLOCKED
            )
        elif decision.source == "fail_open":
            self.outcome = Outcome.FAIL_OPEN
        elif self.header == "validate" and self.error is None:
            self.outcome = Outcome.VALIDATED
        else:
            self.outcome = Outcome.SHADOW_BLOCKED if self.violation else Outcome.ALLOWED

    def rejected(self) -> None:
        """``op`` did not parse, validate or pass the static limits (unless the limiter
        refused it already)."""
        if self.decision is None or self.decision.allowed:
            self.outcome = Outcome.REJECTED

    def violated(self, code: str) -> None:
        """Shadow mode let ``op`` past a limit (``code``) that would have refused it."""
        if self.violation is None:
            self.violation = code
        if self.outcome is Outcome.ALLOWED:
            self.outcome = Outcome.SHADOW_BLOCKED

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
        return operation_type(self.document, self.operation_name)

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
    def headers(self) -> dict[str, str]:
        """``RateLimit`` (with the ``quotaql-warn`` parameter of a ``warn_at`` warning),
        ``RateLimit-Policy``, ``X-RateLimit-*`` and ``Retry-After``; and the cost headers
        (``[limits] cost_headers``): :mod:`quotaql.gate.warn`."""
        decision = self.decision
        if decision is None:  # nothing debited, or refused before (TOO_MANY_CONCURRENT)
            retry = concurrency_wait(self)
            headers = {} if retry is None else {"Retry-After": str(max(1, math.ceil(retry)))}
        elif not decision.allowed and self.error is None:
            headers = {}  # a shadow refusal: no refusal headers
        elif self.skipped is not None and self.error is None:  # the skipped fields' quotas too
            headers = self.skipped.headers(decision, self.quotas)
        else:
            headers = rate_limit_headers(decision, self.quotas)
        caution = warn.caution_of(self)
        if caution is not None and "RateLimit" in headers:
            headers["RateLimit"] = warn.warned_item(headers["RateLimit"], caution)
        names = self.cost_names
        if names is not None:
            estimated, actual, _ = warn.cost_values(self)
            headers.update(warn.cost_headers(names, estimated, actual))
        return headers


class Work:
    """One operation's worker time: what was measured (ns), and the phases open now
    (:mod:`quotaql.gate.worktime` measures it)."""

    __slots__ = ("__weakref__", "charged", "ns", "phase", "running")

    def __init__(self) -> None:
        self.ns = 0.0
        self.phase: tuple[int, int] | None = None  # an exclusive phase: (thread, start)
        # Execution (a shared phase): its thread's state (``quotaql.gate.worktime``), the
        # thread, and the thread's share of time at the start.
        self.running: tuple[Any, int, float] | None = None
        self.charged = False

    @property
    def ms(self) -> float:
        """What was measured, in milliseconds."""
        return self.ns / 1e6


_current: contextvars.ContextVar[Operation | None] = contextvars.ContextVar(
    "quotaql_operation", default=None
)


def current_operation() -> Operation | None:
    """The operation the gate is working on (for resolvers such as ``rateLimit``)."""
    return _current.get()


def enter(op: Operation) -> None:
    """``op`` is the operation :func:`current_operation` answers from now on (in this
    context)."""
    _current.set(op)


@contextlib.contextmanager
def operation_scope() -> Iterator[None]:
    """Where one operation runs: :func:`current_operation` starts empty inside and is
    what it was again after (an adapter wraps each operation in it)."""
    token = open_scope()
    try:
        yield
    finally:
        close_scope(token)


def open_scope() -> contextvars.Token[Operation | None]:
    """:func:`operation_scope` opened by hand (a hook that is itself a generator): the
    token that :func:`close_scope` takes."""
    return _current.set(None)


def close_scope(token: contextvars.Token[Operation | None]) -> None:
    """Close the scope :func:`open_scope` opened."""
    _current.reset(token)


def concurrency_wait(op: Operation) -> float | None:
    """The ``retryAfter`` of ``op``'s ``TOO_MANY_CONCURRENT`` refusal (None: not one)."""
    error = op.error
    if error is None or not error.extensions:
        return None
    extensions = error.extensions
    if extensions.get("code") != TOO_MANY_CONCURRENT:
        return None
    retry = extensions.get("retryAfter")
    return float(retry) if isinstance(retry, int | float) else None


def operation_type(document: Any, operation_name: str | None) -> str | None:
    """The type of the operation that runs, before (or without) pricing it."""
    if not isinstance(document, DocumentNode):
        return None
    try:
        operation, _ = select_operation(document, operation_name)
    except CostAnalysisError:
        return None
    return operation.operation.value
