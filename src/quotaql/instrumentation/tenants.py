"""Which tenants get a label value of their own in the per-tenant metrics."""

from __future__ import annotations

import hashlib
import heapq
import threading
from typing import TYPE_CHECKING

from quotaql.instrumentation import names

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["TenantLabels"]


class TenantLabels:
    """Which tenants get their own label value: an allowlist, then a bounded top-N.

    The top-N is counted with the Space-Saving algorithm over ``8 × top_n`` counters (a
    bounded memory however many tenants there are); a tenant enters the labelled set once
    it ranks in the top ``top_n`` while the set has room, and keeps its label afterwards, so
    at most ``len(allowlist) + top_n + 1`` values ever exist. Allowlisted tenants appear as
    they are; top-N tenants as ``h:<12 hex digits of SHA-256>`` (a tenant is often an API
    key, which must not end up in a metrics database).
    """

    def __init__(self, allowlist: Iterable[str] = (), top_n: int = 0) -> None:
        if top_n < 0:
            raise ValueError(f"top_n must be >= 0, got {top_n}")
        self.allowlist = frozenset(allowlist)
        self.top_n = top_n
        self._labelled: dict[str, str] = {}
        self._counts: dict[str, int] = {}
        self._capacity = 8 * top_n
        self._lock = threading.Lock()

    def label(self, tenant: str) -> str:
        """The label value for ``tenant``."""
        if tenant in self.allowlist:
            return tenant
        known = self._labelled.get(tenant)
        if known is not None:
            return known
        if len(self._labelled) >= self.top_n:  # no room left (or no top-N): no counting
            return names.OTHER_TENANT
        with self._lock:
            return self._count(tenant)

    def _count(self, tenant: str) -> str:
        counts = self._counts
        if tenant in counts:
            counts[tenant] += 1
        elif len(counts) < self._capacity:
            counts[tenant] = 1
        else:  # Space-Saving: the new tenant takes over the smallest counter
            smallest = min(counts, key=counts.__getitem__)
            counts[tenant] = counts.pop(smallest) + 1
        if len(self._labelled) < self.top_n and tenant in heapq.nlargest(
            self.top_n, counts, key=counts.__getitem__
        ):
            digest = hashlib.sha256(tenant.encode("utf-8", "surrogatepass")).hexdigest()
            self._labelled[tenant] = f"h:{digest[:12]}"
            return self._labelled[tenant]
        return names.OTHER_TENANT
