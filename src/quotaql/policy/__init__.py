"""The limiter's pure math and values: algorithms, quotas, decisions (no I/O, no clock)."""

from __future__ import annotations

from quotaql.policy.quota import Decision, Quota, QuotaStatus

__all__ = ["Decision", "Quota", "QuotaStatus"]
