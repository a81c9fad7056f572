"""Read ``quotaql.toml`` into frozen values, with errors that name the file, line and key.

The file has six top-level tables, all optional: ``[cost]`` (how an operation is priced),
``[limits]`` (how the limiter behaves), ``[tiers]`` (the quotas of each plan), ``[tenants]``
(who is on which plan), ``[global]`` (one platform-wide quota) and ``[alerts]`` (the
thresholds of the generated Prometheus alert rules).

The values are in :mod:`quotaql.config.values`, the reading of the file in
:mod:`quotaql.config.reader` and the line of each key in :mod:`quotaql.config.locator`;
:class:`AlertsConfig` is beside the alert generator, in
:mod:`quotaql.observability.thresholds`.
"""

from __future__ import annotations

from quotaql.config.reader import default_config, load_config, load_cost_config
from quotaql.config.values import (
    Config,
    CostConfig,
    LimitsConfig,
    Mode,
    TenantConfig,
    TierConfig,
)
from quotaql.observability.thresholds import AlertsConfig

__all__ = [
    "AlertsConfig",
    "Config",
    "CostConfig",
    "LimitsConfig",
    "Mode",
    "TenantConfig",
    "TierConfig",
    "default_config",
    "load_config",
    "load_cost_config",
]
