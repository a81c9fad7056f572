"""Pricing one operation: the static analysis of its document against the cost model."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from quotaql.contract import graphql_error
from quotaql.cost_analysis import analyze
from quotaql.errors import CostAnalysisError, LimitExceeded
from quotaql.instrumentation import names
from quotaql.policy.modes import Mode

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from quotaql.config import CostConfig
    from quotaql.cost_analysis.analyzer import CostReport
    from quotaql.gate.operation import Operation

__all__ = ["price", "repriced"]


def price(
    op: Operation,
    schema: Any,
    document: Any,
    variables: Mapping[str, Any] | None,
    operation_name: str | None,
    cost: CostConfig,
    log: Callable[..., None],
) -> bool:
    """Price ``op`` (``log``: the gate's log of an operation); False (with its error set)
    when the analysis refuses it."""
    try:
        try:
            op.report = analyze(
                schema, document, variables, operation_name, cost.model, cost.limits
            )
        except LimitExceeded as exceeded:
            if op.mode is not Mode.SHADOW:
                raise
            if op.violation != exceeded.code:  # the static pass logged it already
                log(op, names.SHADOW_BLOCKED, exceeded.code)
            op.violated(exceeded.code)
            op.report = analyze(schema, document, variables, operation_name, cost.model)
    except CostAnalysisError as error:
        op.refuse(graphql_error(error))
        op.rejected()
        log(op, names.REJECTED, error.code)
        return False
    return True


def repriced(op: Operation, cost: CostConfig, report: CostReport) -> CostReport:
    """Open subscription ``op``'s report under the weights of ``cost`` (a reload: its
    events pay them; the new limits do not end it, it was admitted), or ``report`` when
    the new model cannot price it."""
    try:
        return analyze(op.schema, op.document, op.variables, op.operation_name, cost.model)
    except CostAnalysisError:
        return report
