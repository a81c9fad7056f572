"""How the gate refuses: the limiter's refusals (jittered, remembered by the deny cache), the
refusals of requests that were never priced, and the minimum charge such requests pay."""

from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING, Any

from quotaql._flow import Acquire
from quotaql.contract import (
    BAD_COST_HEADER,
    RATE_LIMITED,
    bad_cost_header_error,
    error_code,
    rate_limit_error,
    status_for,
    unknown_key_error,
)
from quotaql.gate import charges, worktime
from quotaql.gate.operation import Outcome
from quotaql.instrumentation import names
from quotaql.limiter.deny import DenyCache
from quotaql.policy.modes import Mode

if TYPE_CHECKING:
    from collections.abc import Generator, Sequence

    from graphql import GraphQLError

    from quotaql.config import Config
    from quotaql.gate.operation import Operation
    from quotaql.gate.record import OperationRecorder
    from quotaql.gate.scaling import Scaling
    from quotaql.identity import Subject
    from quotaql.policy.quota import Decision, Quota

__all__ = ["Refusals", "denial_key"]

# What the address of a refused unknown key pays for the attempt: a key-guessing client
# runs down its own address's budget, nobody else's.
_REJECTED_KEY_CHARGE = 1.0


class Refusals:
    """The gate's refusals and minimum charges, and its deny cache (:attr:`denials`).

    Args:
        record: the gate's recorder (the log of each refusal).
        scaling: the gate's adaptive limits (what a minimum charge is divided by).
        by_resolver: tiers come from the gate's ``tier_resolver`` (then a minimum charge
            pays the tier's quota, not the ``[tenants]`` table's).
    """

    config: Config  # in force (configure: at once, and at each reload)
    denials: DenyCache  # made anew with each configuration (new budgets, new sizes)

    def __init__(self, record: OperationRecorder, scaling: Scaling, by_resolver: bool) -> None:
        self._log = record.log_op
        self._scaling = scaling
        self.by_resolver = by_resolver

    def configure(self, config: Config) -> None:
        """Take ``config``: a new deny cache too (new budgets, new sizes)."""
        self.config = config
        self.denials = DenyCache(config.limits.deny_cache_size)

    def deny_unparsed(self, op: Operation) -> None:
        """Refuse ``op`` before parsing when the deny cache says even its cheapest request
        would be refused now."""
        denials = self.denials
        if not len(denials):
            return
        denial = denials.before_parsing(denial_key(op.subject))
        if denial is not None:
            minimum = max(self.config.limits.min_charge, 0.0)
            self.deny(op, denial.decision._replace(cost=minimum), denial.quotas, True)

    def deny_priced(self, op: Operation) -> bool:
        """Refuse priced ``op`` when the deny cache kept a refusal of its subject no
        dearer than it, before its time: True when refused."""
        denials = self.denials
        if not len(denials):
            return False
        probe = op.charge if op.base is None else _subject_debit(op)
        denial = denials.priced(denial_key(op.subject), probe)
        if denial is None:
            return False
        self.deny(op, denial.decision._replace(cost=op.charge), op.quotas)
        return True

    def failed(self, op: Operation, errors: Sequence[GraphQLError]) -> None:
        op.refuse(errors[0], None, *errors[1:])
        op.failed = True
        op.rejected()
        code = op.code or "GRAPHQL_VALIDATION_FAILED"
        self._log(op, names.REJECTED, code)

    def bad_header(self, op: Operation, sent: str) -> None:
        """A ``GraphQL-Cost`` value quotaql does not know: refused ``BAD_COST_HEADER``, HTTP
        400 (paying ``min_charge``, as a document that does not parse); in shadow mode let
        through, counted and logged."""
        if op.mode is Mode.ENFORCE:
            self.failed(op, [bad_cost_header_error(sent)])
            op.status = 400  # the client's mistake, whatever its framework answers others'
        else:
            op.violated(BAD_COST_HEADER)
            self._log(op, names.SHADOW_BLOCKED, BAD_COST_HEADER)

    def charge_minimum(self, op: Operation) -> Generator[Any, Any, None]:
        """``[limits] min_charge`` (or the document's size in points, when more:
        :func:`~quotaql.gate.charges.least`) from ``op``'s subject: a request refused
        before pricing, a static-limit refusal, or a ``GraphQL-Cost: validate`` request.
        Out of budget, it is refused ``RATE_LIMITED`` (an invalid document keeps its
        errors) and pays nothing; charged once."""
        if op.mode is Mode.OFF or op.decision is not None or op.denied:
            return
        paid = yield from self._pay_minimum(op)
        if paid is None:
            return
        decision, op.quotas, op.costs = paid
        op.charge = op.least
        if decision.allowed and op.error is not None:
            op.decision = decision  # a refused document stays rejected
        else:
            op.decided(decision)
        if decision.allowed:
            return
        if op.mode is not Mode.ENFORCE:
            self._log(op, names.SHADOW_BLOCKED, error_code(decision))
            return
        self.remember(op, decision, op.quotas)
        if op.error is None:  # a validate-only request: refused like any other
            self.rate_limited(op, decision)

    def charge_refusal(self, op: Operation) -> Generator[Any, Any, None]:
        """``min_charge`` for an operation refused because it can never fit
        (``COST_EXCEEDS_CAPACITY``: waiting never helps, so a client that asks again and
        again pays each time, as for a static limit); its answer stays that refusal."""
        paid = yield from self._pay_minimum(op)
        if paid is None:
            return
        decision, quotas, _ = paid
        if decision.allowed:
            op.charge = op.least
            op.paid_minimum = decision.source != "fail_open"
        else:
            self.remember(op, decision, quotas)

    def _pay_minimum(
        self, op: Operation
    ) -> Generator[Any, Any, tuple[Decision, tuple[Quota, ...], tuple[float, ...] | None] | None]:
        """Debit ``[limits] min_charge`` (or the document's size in points, when more) from
        the quotas a request pays before it is priced: the storage's decision, the quotas
        and their amounts; None when that is 0."""
        config = self.config
        minimum = charges.least(config, op)
        if minimum <= 0:
            return None
        tier = op.tier if self.by_resolver else None
        multiplier = self._scaling.multiplier_for(op)
        quotas, costs = charges.charges_for(config, op.subject, None, tier, minimum, multiplier)
        fitted = charges.fitted(config, minimum, quotas)
        if fitted != minimum:  # its size, past what a quota holds: as much as it holds
            minimum = fitted
            quotas, costs = charges.charges_for(config, op.subject, None, tier, fitted, multiplier)
        op.least = minimum
        # The time quota checked too: a subject in debt is refused whatever it sends.
        decision: Decision = yield worktime.acquire(op, minimum, quotas, costs)
        return worktime.points(decision), quotas, costs

    def deny(
        self, op: Operation, decision: Decision, quotas: tuple[Quota, ...], unpriced: bool = False
    ) -> None:
        """Refuse ``op`` from the deny cache: the storage refused its subject a moment ago."""
        op.denied = True
        op.quotas = quotas
        self.rate_limited(op, decision, unpriced=unpriced)
        op.outcome = Outcome.DENIED
        self._log(op, names.DENIED, RATE_LIMITED)

    def rate_limited(
        self, op: Operation, decision: Decision, *, unpriced: bool = False
    ) -> GraphQLError:
        """Refuse ``op`` for the storage's (or the deny cache's) refusal ``decision``: its
        retry time jittered, in the error and in the headers alike. A subscription's
        later event is refused as one (``"This subscription event costs ..."``)."""
        decision = self._jittered(decision)
        op.decided(decision)
        what = "subscription event" if op.events > 1 else "query"
        return self.refuse(op, rate_limit_error(decision, unpriced=unpriced, what=what))

    def remember(
        self, op: Operation, decision: Decision, quotas: tuple[Quota, ...] | None = None
    ) -> None:
        """Keep a refusal of ``op``'s subject (for ``quotas``, default ``op.quotas``) in the
        deny cache (when waiting helps)."""
        minimum = self.config.limits.min_charge
        quotas = op.quotas if quotas is None else quotas
        self.denials.remember(denial_key(op.subject), decision, quotas, min_charge=minimum)

    def _jittered(self, decision: Decision) -> Decision:
        """``decision`` with its retry time plus up to ``retry_jitter`` of it: never less."""
        jitter = self.config.limits.retry_jitter
        retry = decision.retry_after
        if not jitter or not retry or not math.isfinite(retry):
            return decision
        return decision._replace(retry_after=retry * (1.0 + jitter * random.random()))  # noqa: S311

    def reject_key(self, op: Operation) -> Generator[Any, Any, None]:
        """An unknown key under ``unknown_keys = "reject"``: the address pays for the try."""
        quota = op.tier.quota
        config = self.config
        charge = max(_REJECTED_KEY_CHARGE, config.limits.min_charge)
        costs = None
        multiplier = self._scaling.multiplier_for(op)
        if multiplier < 1.0 and op.tier.name in config.adaptive_tiers:
            costs = charges.scaled(config.adaptive, (quota,), None, charge, multiplier)
        decision: Decision = yield Acquire(op.subject.key, charge, (quota,), costs)
        op.quotas, op.charge = (quota,), charge
        op.decided(decision)
        header = self.config.identity.api_key_header
        if op.mode is not Mode.ENFORCE:
            self._log(op, names.SHADOW_BLOCKED, "UNKNOWN_API_KEY")
            return
        if not decision.allowed and decision.reason == "rate_limited":
            self.remember(op, decision)  # the address's next tries are refused from memory
            self.rate_limited(op, decision)  # key guessing runs its address dry
        else:
            self.refuse(op, unknown_key_error(header))
            op.decision = None  # no budget headers on a 401
            op.outcome = Outcome.UNKNOWN_KEY
        self._log(op, names.UNKNOWN_KEY)

    def refuse(self, op: Operation, error: GraphQLError) -> GraphQLError:
        """Refuse ``op`` with a limiter's ``error`` and the HTTP status its code has."""
        code = (error.extensions or {}).get("code")
        op.refuse(error, status_for(str(code), self.config.limits.http_status))
        return error


def denial_key(subject: Subject) -> str:
    """The deny cache's key: a user's refusal (``per_user``) is not its tenant's."""
    user = subject.user
    return subject.key if user is None else f"{subject.key}\0{user}"


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
