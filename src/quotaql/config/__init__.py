"""Read ``quotaql.toml`` into frozen values, with errors that name the file, line and key.

The file has nine top-level tables, all optional: ``[cost]`` (how an operation is priced),
``[limits]`` (how the limiter behaves), ``[tiers]`` (the quotas of each plan), ``[tenants]``
(who is on which plan), ``[global]`` (one platform-wide quota), ``[identity]`` (where
subjects come from), ``[adaptive]`` (which tiers adaptive limits scale, and how),
``[alerts]`` (the thresholds of the generated Prometheus alert rules) and ``[redis]`` (what
the Redis storages accept of their server).

The values are in :mod:`quotaql.config.values` (and, for the tables of the features they
configure, :mod:`quotaql.config.identity`, :mod:`quotaql.config.adaptive` and
:mod:`quotaql.config.alerts`); the reading of the file in :mod:`quotaql.config.reader`, with
:mod:`~quotaql.config.document` (the file as read), :mod:`~quotaql.config.checks` (single
values), :mod:`~quotaql.config.features` (the feature tables) and
:mod:`~quotaql.config.locator` (the line of each key). The package holds values only: it
imports nothing above :mod:`quotaql.policy` and :mod:`quotaql.cost_analysis.model`, and what
an operation pays under them is the gate's (:mod:`quotaql.gate.charges`).
"""

from __future__ import annotations

from quotaql.config.adaptive import AdaptiveConfig
from quotaql.config.alerts import AlertsConfig
from quotaql.config.identity import IdentityConfig
from quotaql.config.reader import default_config, load_config, load_cost_config
from quotaql.config.values import (
    Config,
    CostConfig,
    LimitsConfig,
    Mode,
    TenantConfig,
    TierConfig,
)

__all__ = [
    "AdaptiveConfig",
    "AlertsConfig",
    "Config",
    "CostConfig",
    "IdentityConfig",
    "LimitsConfig",
    "Mode",
    "TenantConfig",
    "TierConfig",
    "default_config",
    "load_config",
    "load_cost_config",
]
