"""The thresholds of the generated Prometheus alert rules: the ``[alerts]`` table.

They are configuration values, read and held by :mod:`quotaql.config.alerts`; this module
keeps the path the alert generator and its users import them by.
"""

from __future__ import annotations

from quotaql.config.alerts import ALERT_KINDS, AlertsConfig

__all__ = ["ALERT_KINDS", "AlertsConfig"]
