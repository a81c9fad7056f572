"""How the storages name a tenant's state: in memory (a key part) and in Redis (a hash tag)."""

from __future__ import annotations

import base64
import hashlib
import re

__all__ = ["PLAIN_TENANT_MAX", "redis_key_base", "tenant_digest", "tenant_part"]

# The longest tenant key the memory storages keep as it is (ASCII only); any other is stored
# as its digest.
PLAIN_TENANT_MAX = 64
# A tenant Redis keys carry as it is in their hash tag; any other is hashed.
_SAFE_TENANT = re.compile(r"[A-Za-z0-9_.:@/+=-]{1,64}")


def tenant_digest(tenant: str) -> str:
    """128 bits of ``tenant``'s SHA-256, in 22 URL-safe characters: what the storages keep
    of a tenant key that is long or outside a safe alphabet (no practical collision)."""
    digest = hashlib.sha256(tenant.encode("utf-8", "surrogatepass")).digest()[:16]
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def tenant_part(tenant: str | None) -> str:
    """The tenant's part of its state keys in memory: ``"\\0" + tenant`` for a short ASCII
    tenant, ``"\\2" + digest`` for any other, ``"\\1"`` for the shared scope of ``shared``
    quotas.

    Quota names cannot hold a control character, so the first one ends the name and says
    which kind of tenant follows: no two (quota, tenant) pairs share a key, a plain tenant
    never spells another's digest, and one string costs less memory than a tuple.
    """
    if tenant is None:
        return "\1"
    if len(tenant) <= PLAIN_TENANT_MAX and tenant.isascii():
        return f"\0{tenant}"
    return "\2" + tenant_digest(tenant)  # as the Redis storage hashes such tenants


def redis_key_base(prefix: str, tenant: str | None) -> str:
    """Everything of a tenant's Redis keys but the quota or limit name: ``quotaql:{t:acme}:``
    (one hash tag per tenant: all its keys share one Redis Cluster slot)."""
    if tenant is None:
        tag = "global"
    elif _SAFE_TENANT.fullmatch(tenant):
        tag = f"t:{tenant}"
    else:
        # Braces, spaces, unicode, very long keys: hashed, so none can break out of the tag.
        # 128 bits in 22 characters: short keys cost Redis less memory per tenant.
        tag = "h:" + tenant_digest(tenant)
    return f"{prefix}:{{{tag}}}:"
