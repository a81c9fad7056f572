"""The request gate: the whole story of one GraphQL operation, for any server
(:class:`Gate`, in :mod:`quotaql.gate.core`), and the rooms it asks for each part of it."""

from quotaql.gate.adapter import Adapter
from quotaql.gate.core import Gate
from quotaql.gate.operation import (
    CostHeader,
    Operation,
    Outcome,
    close_scope,
    current_operation,
    open_scope,
    operation_scope,
)
from quotaql.gate.options import FromConfigOptions, GateOptions
from quotaql.gate.tiers import TierResolver

__all__ = [
    "Adapter",
    "CostHeader",
    "FromConfigOptions",
    "Gate",
    "GateOptions",
    "Operation",
    "Outcome",
    "TierResolver",
    "close_scope",
    "current_operation",
    "open_scope",
    "operation_scope",
]
