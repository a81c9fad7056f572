"""Which tier a subject is in: the ``[tenants]`` table, or the gate's tier resolver."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from quotaql.instrumentation.logs import clipped

if TYPE_CHECKING:
    from quotaql.config import Config, TierConfig
    from quotaql.identity import Subject
    from quotaql.instrumentation.logs import StructuredLog

__all__ = ["TierResolver", "resolve_tier"]

#: ``tier_resolver(subject, context) -> tier name | None``.
TierResolver = Callable[["Subject", Any], "str | None"]


def resolve_tier(
    config: Config,
    resolver: TierResolver | None,
    subject: Subject,
    context: Any,
    log: StructuredLog,
) -> TierConfig:
    """``subject``'s tier: the ``[tenants]`` table's, or what ``resolver`` names (the
    default tier when it fails or names an unknown one: logged)."""
    if resolver is None:
        return config.tier_of(subject.tenant)
    try:
        name = resolver(subject, context)
    except Exception as error:  # a bug in the resolver must not fail the request
        log.log(
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
        shown = clipped(repr(name), 100)  # what a resolver returns may come from a client
        log.log(
            logging.WARNING,
            "unknown_tier",
            "quotaql: the tier resolver named an unknown tier %s; using the default tier",
            shown,
            subject=subject.key,
            tier=shown,
        )
        return config.tier_of(None)
    return tier
