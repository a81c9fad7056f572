"""Strawberry glue: the :class:`CostLimiter` schema extension and the ``rateLimit`` field."""

from __future__ import annotations

from quotaql.plugin.extension import CostLimiter, current_operation

__all__ = ["CostLimiter", "current_operation"]
