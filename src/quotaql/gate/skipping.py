"""Partial answers: ``[limits] on_field_limit = "skip"``.

When the only quotas that refuse an operation are root fields' own (``[tiers.<t>.fields]``,
named ``field:<coordinate>``) and those fields are nullable, the operation runs without
them: each response key that selects one is ``null`` with a ``RATE_LIMITED`` error at its
path (``retryAfter``, ``quota``... as a refusal's), the status is 200, and the operation is
debited again without their quotas and without their share of the cost (the storage's
acquire is all or nothing: the refused one took nothing). Several refusing fields are all
skipped; the loop asks the storage at most once per distinct root field. The response's
rate-limit headers describe the tightest quota, a skipped field's when it is, without a
``Retry-After`` (the answer is a success).

How a skipped field becomes ``null`` in every adapter (Strawberry, Ariadne, plain
graphql-core): the first time a root field is skipped, its resolver (the schema's
``GraphQLField.resolve``) is wrapped by a guard that raises the operation's error instead
of calling it while the operation running (:func:`~quotaql.gate.operation.current_operation`)
skipped that field at the root. The executor puts ``null`` and the error at each of its
paths (aliases and fragments alike) and runs nothing below it. A root field never skipped
is never wrapped; a wrapped one costs each operation that selects it one context-variable
read. A wrapped field without a resolver of its own resolves with graphql-core's
``default_field_resolver``.

Refused as before, never skipped: a non-nullable field (its ``null`` would erase the whole
``data``); an operation all of whose root fields would be skipped (nothing would run: the
refusal's 429 and ``Retry-After`` say more); a subscription (one root field, nothing left);
a field whose quota can never hold it (``COST_EXCEEDS_CAPACITY``); any refusal by another
quota (the tenant's, the user's, the operation's, the global one, the time quota). Shadow
mode refuses nothing, so skips nothing. A mutation's root fields are skipped like a query's:
GraphQL runs them one after the other, each on its own (an error in one does not stop the
next), so a skipped one is answered as if its resolver had raised before doing anything.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import random
import threading
from typing import TYPE_CHECKING, Any, Final

from graphql import GraphQLObjectType, default_field_resolver, is_non_null_type

from quotaql.contract import RATE_LIMITED, QuotaqlGraphQLError, rate_limit_error, rate_limit_headers
from quotaql.cost_analysis._compile import graphql_schema
from quotaql.gate import worktime
from quotaql.gate.operation import current_operation
from quotaql.instrumentation import names
from quotaql.instrumentation.logs import clipped
from quotaql.policy.modes import Mode
from quotaql.policy.numbers import points, seconds

if TYPE_CHECKING:
    from collections.abc import Generator, Mapping, Sequence

    from graphql import GraphQLError, GraphQLSchema

    from quotaql.config import Config
    from quotaql.cost_analysis import CostReport
    from quotaql.gate.operation import Operation
    from quotaql.gate.record import OperationRecorder
    from quotaql.policy.quota import Decision, Quota, QuotaStatus

__all__ = ["Skipped", "Skipping", "unskipped"]

#: The prefix of a root field's quota name (``field:Query.search``, config/reader.py).
FIELD: Final = "field:"
_RUNS: Final = frozenset({"query", "mutation"})


class Skipped:
    """What one operation runs without: each skipped root field's error (by coordinate),
    the refusing quotas and their statuses, and the response keys answered ``null``.

    Attributes:
        errors: by coordinate, the error each of its paths is answered with.
        statuses: the refusing quotas' statuses (what the headers may show).
        quotas: the refusing quotas (listed in ``RateLimit-Policy``).
        keys: the response keys the executor answered ``null``, as it reached them.
        seen: the coordinates whose guard answered (each skipped one, once it ran).
    """

    __slots__ = ("errors", "keys", "quotas", "seen", "statuses")

    def __init__(
        self,
        errors: dict[str, GraphQLError],
        statuses: tuple[QuotaStatus, ...],
        quotas: tuple[Quota, ...],
    ) -> None:
        self.errors = errors
        self.statuses = statuses
        self.quotas = quotas
        self.keys: list[str] = []
        self.seen: set[str] = set()

    def error(self, info: Any) -> GraphQLError | None:
        """The error to answer at ``info``'s path (a ``GraphQLResolveInfo``) instead of
        resolving it (None: resolve): only a skipped field at the root (a root type's field
        reached deeper, through a field returning ``Query``, was charged with the rest and
        runs)."""
        path = info.path
        if path.prev is not None:
            return None
        coordinate = f"{info.parent_type.name}.{info.field_name}"
        found = self.errors.get(coordinate)
        if found is None:
            return None
        self.seen.add(coordinate)
        self.keys.append(str(path.key))
        return QuotaqlGraphQLError(
            found.message,
            info.field_nodes,
            path=path.as_list(),
            extensions=dict(found.extensions or {}),
        )

    def headers(self, decision: Decision, quotas: Sequence[Quota]) -> dict[str, str]:
        """The rate-limit headers of an operation that ran (``decision``, on ``quotas``)
        without the skipped fields: the tightest quota of all, theirs included, without a
        ``Retry-After``; ``RateLimit-Policy`` lists them too."""
        shown = decision
        tightest = min(self.statuses, key=lambda status: status.remaining)
        if tightest.remaining <= decision.remaining:
            shown = decision._replace(
                remaining=tightest.remaining,
                limit=tightest.limit,
                reset_after=tightest.reset_after,
                limited_by=tightest.name,
            )
        return rate_limit_headers(shown, (*quotas, *self.quotas))


class Skipping:
    """The gate's partial answers: which refused operations run without some root fields,
    and what is debited for them instead (see the module).

    Args:
        record: the gate's recorder (its metrics, log and tenants' names).
    """

    def __init__(self, record: OperationRecorder) -> None:
        self._record = record

    def skip(
        self, config: Config, op: Operation, decision: Decision, ledger: worktime.Ledger
    ) -> Generator[Any, Any, Decision]:
        """The flow that turns ``op``'s refusal ``decision`` (by root-field quotas only)
        into a debit without the refusing fields, when ``op`` may skip them: the storage's
        decision on what it pays now (allowed: it runs, :attr:`Operation.skipped` says
        without what), or the refusal to answer: ``decision`` itself (``op`` untouched), or
        the storage's refusal of the smaller debit by another quota (``op`` then holds that
        debit: its charge and quotas, as a refusal of it would)."""
        report = op.report
        if (
            report is None
            or op.mode is not Mode.ENFORCE
            or decision.reason != "rate_limited"
            or report.operation_type not in _RUNS
        ):
            return decision
        roots = report.root_field_costs
        schema = graphql_schema(op.schema)
        refused: dict[str, tuple[QuotaStatus, float, Quota]] = {}
        first = decision
        for _ in range(len(roots)):  # each turn skips one field more, or stops
            found = _refusing(decision, op, schema, refused)
            if found is None or len(refused) + len(found) >= len(roots):
                break  # another quota refused, a field cannot be skipped, or nothing is left
            refused.update(found)
            _debit_without(op, report, refused)
            decision = yield worktime.acquire(op, ledger=ledger)
            decision = worktime.points(decision, op, ledger)
            if decision.allowed:
                op.report = _reduced(report, refused)
                op.skipped = self._skipped(config, first, refused)
                for coordinate in refused:
                    guard(schema, coordinate)
                self._counted(op, refused)
                return decision
            if decision.reason != "rate_limited":
                break
        return decision

    def _skipped(
        self,
        config: Config,
        decision: Decision,
        refused: Mapping[str, tuple[QuotaStatus, float, Quota]],
    ) -> Skipped:
        """What ``op`` runs without: each field's error, as a refusal of its quota alone."""
        jitter = config.limits.retry_jitter
        errors: dict[str, GraphQLError] = {}
        for coordinate, (status, amount, _) in refused.items():
            retry = status.retry_after
            if jitter and retry and math.isfinite(retry):
                retry *= 1.0 + jitter * random.random()  # noqa: S311  (as a refusal's)
            alone = decision._replace(
                cost=amount,
                remaining=status.remaining,
                limit=status.limit,
                retry_after=retry,
                reset_after=status.reset_after,
                limited_by=status.name,
                quotas=(status,),
            )
            errors[coordinate] = rate_limit_error(alone, what="field")
        statuses = tuple(status for status, _, _ in refused.values())
        return Skipped(errors, statuses, tuple(quota for _, _, quota in refused.values()))

    def _counted(
        self, op: Operation, refused: Mapping[str, tuple[QuotaStatus, float, Quota]]
    ) -> None:
        """The metric of each skipped field, the span's event and one log line."""
        record = self._record
        coordinates = list(refused)
        if record.metrics is not None:
            record.metrics.skips.skipped(coordinates, op.tier.name)
        if op.span is not None:
            op.span.add_event(names.EVENT_FIELDS_SKIPPED, {names.ATTR_SKIPPED: coordinates})
        log = record.log
        suppressed = log.take(logging.INFO, names.FIELDS_SKIPPED, op.subject.key)
        if suppressed is None:
            return
        status = min((each for each, _, _ in refused.values()), key=lambda s: s.remaining)
        retry = seconds(status.retry_after or 0.0)
        report = op.report
        name = report.operation_name if report is not None else None
        what = op.operation_type or "operation"
        if name:
            what = f"{what} {clipped(name, 100)}"
        tenant = clipped(record.names.shown(op.subject))
        fields = ", ".join(coordinates)
        log.emit(
            logging.INFO,
            names.FIELDS_SKIPPED,
            suppressed,
            "%s",
            f"quotaql: ran {what} of tenant {tenant} (tier {op.tier.name}) without {fields}:"
            f" {points(status.remaining)} of {points(status.limit)} left on quota"
            f' "{status.name}"; retry in {retry} s',
            tenant=tenant,
            identity=op.subject.source,
            tier=op.tier.name,
            code=RATE_LIMITED,
            skipped=coordinates,
            limited_by=status.name,
            remaining=points(status.remaining),
            limit=points(status.limit),
            retry_after=retry,
            cost=points(op.charge),
            operation_type=op.operation_type,
            operation_name=name,
        )


def unskipped(
    op: Operation, data: Any, errors: Sequence[Any] | None
) -> tuple[Any, Sequence[Any] | None]:
    """``data`` and ``errors`` as settling reads them: without the response keys ``op``
    skipped and their errors, so that a skipped field is neither charged its estimate (an
    error's erasure) nor counted (a ``null``): it was not debited, and did not run.

    A skipped field whose guard never answered (the server executed another schema than
    it admitted with, or outside the operation's context) may have run: then nothing is
    taken out, and what ran is charged as its actual cost (an overage above the debit)."""
    skipped = op.skipped
    if skipped is None or not skipped.keys or len(skipped.seen) < len(skipped.errors):
        return data, errors
    keys = set(skipped.keys)
    if isinstance(data, dict):
        data = {key: value for key, value in data.items() if key not in keys}
    if errors:
        errors = [error for error in errors if not _under(error, keys)] or None
    return data, errors


def _under(error: Any, keys: set[str]) -> bool:
    """``error``'s path starts at one of ``keys`` (a formatted error's too)."""
    path = error.get("path") if isinstance(error, dict) else getattr(error, "path", None)
    if not path:
        return False
    return path[0] in keys


def _refusing(
    decision: Decision,
    op: Operation,
    schema: GraphQLSchema,
    refused: Mapping[str, object],
) -> dict[str, tuple[QuotaStatus, float, Quota]] | None:
    """The root fields whose quotas refused ``decision``, with each quota's status, what it
    was asked and the quota: None when another quota refused too, or one of them cannot be
    skipped (not nullable, skipped already, or a quota that can never hold it)."""
    amounts = op.costs if op.costs is not None else (op.charge,) * len(op.quotas)
    asked = {quota.name: (amount, quota) for quota, amount in zip(op.quotas, amounts, strict=True)}
    found: dict[str, tuple[QuotaStatus, float, Quota]] = {}
    for status in decision.quotas:
        if status.allowed:
            continue
        name = status.name
        coordinate = name.removeprefix(FIELD)
        if (
            coordinate == name
            or status.retry_after is None
            or coordinate in refused
            or name not in asked
            or not _nullable(schema, coordinate)
        ):
            return None
        amount, quota = asked[name]
        found[coordinate] = (status, amount, quota)
    return found or None


def _nullable(schema: GraphQLSchema, coordinate: str) -> bool:
    """``coordinate`` (``Query.search``) is a field of the schema whose type is nullable."""
    type_name, _, field_name = coordinate.partition(".")
    root = schema.get_type(type_name)
    if not isinstance(root, GraphQLObjectType):
        return False
    found = root.fields.get(field_name)
    return found is not None and not is_non_null_type(found.type)


def _debit_without(
    op: Operation, report: CostReport, refused: Mapping[str, tuple[QuotaStatus, float, Quota]]
) -> None:
    """``op``'s debit without the quotas of the ``refused`` fields and without their cost:
    the subject's, user's, operation's and global quotas pay the rest (never below what
    ``op`` pays at least, ``op.least``), scaled as they were (adaptive limits); the other
    root fields' quotas pay their own, as before."""
    roots = report.root_field_costs
    cut = sum(roots[coordinate].cost for coordinate in refused if coordinate in roots)
    charge = max(report.cost - cut, op.least, 0.0)
    before = op.charge
    ratio = charge / before if before > 0 else 1.0
    skipped = {f"{FIELD}{coordinate}" for coordinate in refused}
    quotas = op.quotas

    def paid(amounts: Sequence[float]) -> tuple[float, ...]:
        return tuple(
            amount if quota.name.startswith(FIELD) else _scaled(amount, before, charge, ratio)
            for quota, amount in zip(quotas, amounts, strict=True)
            if quota.name not in skipped
        )

    costs = paid(op.costs if op.costs is not None else (before,) * len(quotas))
    if op.base is not None:
        op.base = paid(op.base)
    op.quotas = tuple(quota for quota in quotas if quota.name not in skipped)
    op.costs = None if all(cost == charge for cost in costs) else costs
    op.charge = charge


def _scaled(amount: float, before: float, charge: float, ratio: float) -> float:
    """What a quota debited ``amount`` of a charge of ``before`` is debited of ``charge``
    (``ratio`` of it): exactly ``charge`` where it paid the whole charge."""
    return charge if amount == before else amount * ratio


def _reduced(report: CostReport, refused: Mapping[str, object]) -> CostReport:
    """``report`` without the ``refused`` root fields: its cost less theirs, its root fields'
    costs without them (what the metrics by root field count, and the response shows)."""
    roots = report.root_field_costs
    cut = sum(roots[coordinate].cost for coordinate in refused if coordinate in roots)
    kept = {coordinate: root for coordinate, root in roots.items() if coordinate not in refused}
    return dataclasses.replace(report, cost=max(report.cost - cut, 0.0), _root_costs=kept)


# -- the guard on a skipped root field's resolver ---------------------------------------------


class _Guard:
    """A root field's resolver, answering an operation that skipped it with its error."""

    __slots__ = ("resolve",)

    def __init__(self, resolve: Any) -> None:
        self.resolve = resolve  # the field's own (None: graphql-core's default resolver)

    def __call__(self, source: Any, info: Any, **args: Any) -> Any:
        op = current_operation()
        if op is not None:
            skipped = op.skipped
            if skipped is not None:
                error = skipped.error(info)
                if error is not None:
                    raise error
        resolve = self.resolve
        if resolve is None:
            return default_field_resolver(source, info, **args)
        return resolve(source, info, **args)


_guarding = threading.Lock()


def guard(schema: GraphQLSchema, coordinate: str) -> None:
    """Wrap the resolver of root field ``coordinate`` in ``schema`` (once) so that an
    operation that skips it answers its error instead of running it."""
    type_name, _, field_name = coordinate.partition(".")
    root = schema.get_type(type_name)
    if not isinstance(root, GraphQLObjectType):
        return
    found = root.fields.get(field_name)
    if found is None or isinstance(found.resolve, _Guard):
        return
    with _guarding:
        if not isinstance(found.resolve, _Guard):
            found.resolve = _Guard(found.resolve)
