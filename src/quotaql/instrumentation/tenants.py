"""What logs, spans and metric labels call a subject, and which tenants get a label value
of their own in the per-tenant metrics."""

from __future__ import annotations

import hashlib
import heapq
import threading
from typing import TYPE_CHECKING, Protocol

from quotaql.instrumentation import names

if TYPE_CHECKING:
    from collections.abc import Iterable


class Subject(Protocol):
    """What naming reads of a subject (``quotaql.identity.Subject``, a layer above)."""

    @property
    def key(self) -> str: ...
    @property
    def source(self) -> str: ...
    @property
    def tenant(self) -> str | None: ...


__all__ = ["TenantLabels", "TenantNames", "hashed"]


def hashed(key: str) -> str:
    """What is shown of a subject that may not be named: ``h:`` and 12 hex digits of the
    SHA-256 of its namespaced key (an API key or an address never leaves the process)."""
    return "h:" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:12]


class TenantNames:
    """What a subject is called in logs, spans and metric labels.

    A tenant is named as the operator names it (``[tenants.<name>]``, the ``key_resolver``'s
    tenant, what ``identify`` returned) wherever that name is not a credential:

    - with a ``key_resolver`` (``resolved``), ``[tenants]`` names tenants, never keys;
    - ``identify(context)``'s values are the application's own names for its callers;
    - without a resolver, ``[tenants.<name>]`` *is* the API key: such a tenant is named only
      if the operator lists it in ``allowlist`` (the metrics' ``tenant_allowlist``), else
      it is :func:`hashed`, as every other subject (addresses, users, unknown keys).

    ``allowlist`` takes tenant names (``"acme"``) and namespaced subjects (``"key:acme"``,
    ``"ip:192.0.2.1"``) alike.
    """

    __slots__ = ("allowlist", "resolved")

    def __init__(self, allowlist: Iterable[str] = (), *, resolved: bool = False) -> None:
        self.allowlist = frozenset(allowlist)
        self.resolved = resolved

    def name(self, subject: Subject) -> str | None:
        """``subject``'s tenant name if it may be shown, else None."""
        tenant = subject.tenant
        if tenant is None:
            return None
        if self.resolved or subject.source == "custom":
            return tenant
        allowlist = self.allowlist
        return tenant if tenant in allowlist or subject.key in allowlist else None

    def shown(self, subject: Subject) -> str:
        """What logs and spans show of ``subject``: its name, an allowlisted namespaced key
        as it is, else :func:`hashed`."""
        name = self.name(subject)
        if name is not None:
            return name
        key = subject.key
        return key if key in self.allowlist else hashed(key)


class TenantLabels:
    """Which tenants get their own label value: an allowlist, then a bounded top-N.

    The top-N is counted with the Space-Saving algorithm over ``8 × top_n`` counters (a
    bounded memory however many tenants there are); a tenant enters the labelled set once
    it ranks in the top ``top_n`` while the set has room, and keeps its label afterwards, so
    at most ``len(allowlist) + top_n + 1`` values ever exist. Allowlisted tenants appear as
    the allowlist names them (``"acme"``, or the namespaced ``"key:acme"``); top-N tenants by their
    name where :class:`TenantNames` may show it, else as ``h:<12 hex digits of SHA-256>``
    (a tenant is often an API key, which must not end up in a metrics database).
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

    def label(self, tenant: str, name: str | None = None) -> str:
        """The label value for the subject ``tenant`` (its namespaced key) whose name, where
        it may be shown (:meth:`TenantNames.name`), is ``name``."""
        allowlist = self.allowlist
        if name is not None and name in allowlist:
            return name
        if tenant in allowlist:  # allowlisted by its namespaced key: labelled so, as before
            return tenant
        known = self._labelled.get(tenant)
        if known is not None:
            return known
        if len(self._labelled) >= self.top_n:  # no room left (or no top-N): no counting
            return names.OTHER_TENANT
        with self._lock:
            return self._count(tenant, name)

    def _count(self, tenant: str, name: str | None) -> str:
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
            self._labelled[tenant] = hashed(tenant) if name is None else name
            return self._labelled[tenant]
        return names.OTHER_TENANT
