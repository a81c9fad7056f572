"""How the storages name a tenant's state (in memory a key part, in Redis a hash tag), and where a
full memory table decides a new one."""

from __future__ import annotations

import base64
import functools
import hashlib
import ipaddress
import re
from typing import TYPE_CHECKING, Final, TypeVar

if TYPE_CHECKING:
    from collections import deque
    from collections.abc import Callable, Sequence

__all__ = [
    "ADDRESS_SUBJECT",
    "CLUSTER_SLOTS",
    "PLAIN_TENANT_MAX",
    "ShardKey",
    "cluster_slot",
    "drop_stale",
    "network_places",
    "overflow_network",
    "redis_key_base",
    "shard_key",
    "tenant_digest",
    "tenant_part",
]

# The longest tenant key the memory storages keep as it is (ASCII only); any other is stored
# as its digest.
PLAIN_TENANT_MAX = 64
#: How the gate names a subject identified by its client's address (``quotaql.identity``):
#: ``ip:203.0.113.9``, or an IPv6 client's network, ``ip:2001:db8:1:2::/64``.
ADDRESS_SUBJECT: Final = "ip:"
# The network a new address subject shares an overflow state with, past max_keys.
_OVERFLOW_PREFIX: Final = {4: 24, 6: 48}
_ADDRESS_MAX: Final = 64  # "ip:" and the longest network text (45 characters and a prefix)
_OCTET: Final = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
#: An IPv4 address as identity writes it (no leading zeros), its first three octets apart.
_IPV4: Final = re.compile(rf"({_OCTET}\.{_OCTET}\.{_OCTET})\.{_OCTET}")
_V = TypeVar("_V")
# A tenant Redis keys carry as it is in their hash tag; any other is hashed.
_SAFE_TENANT = re.compile(r"[A-Za-z0-9_.:@/+=-]{1,64}")


#: The hash slots of a Redis Cluster.
CLUSTER_SLOTS: Final = 16384


class ShardKey(str):
    """The key of one shard of the shared quotas (``[global] shards``): its text is the
    shard's hash tag, ``global:<shard>/<shards>`` and a disambiguator (:func:`shard_key`).

    A class of its own, not a reserved spelling: a tenant's key is any string, so no text
    could be kept from naming a tenant; a tenant key is always a plain ``str``, so no tenant
    reaches a shard's state (``redis_key_base`` and ``tenant_part`` tell them apart by
    class, and a tenant's Redis tag always starts ``t:`` or ``h:``).
    """

    __slots__ = ()


def cluster_slot(tag: str) -> int:
    """The Redis Cluster hash slot of a key whose hash tag is ``tag``: CRC16 (XMODEM,
    polynomial 0x1021) of its UTF-8 bytes, modulo :data:`CLUSTER_SLOTS` (as
    ``redis.crc.key_slot`` computes it; the storages do not need redis-py for it)."""
    crc = 0
    for byte in tag.encode("utf-8"):
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc % CLUSTER_SLOTS


@functools.cache
def shard_key(shard: int, shards: int) -> ShardKey:
    """The key of shard ``shard`` (from 0) of ``shards``: a hash tag whose slot is inside
    the ``shard``-th of ``shards`` equal ranges of the slots.

    ``redis-cli --cluster create`` gives each of M masters one contiguous range of about
    16384 / M slots, in order; tags whose slots are one to each of N equal ranges therefore
    land on N different masters when N = M (and on as many as there are when N is a
    multiple of M). A plain ``global:<i>`` leaves that to chance (CRC16 of ``global:0`` and
    ``global:1`` lands both on the second of 2 masters; ``global:0`` to ``global:4`` on 4 of
    5, though right for 3 and 4 by luck), so the
    tag is ``global:<shard>/<shards>`` and the first ``.<n>`` after it (n from 1) whose
    slot lands in its range, one slot in from either end of it. About ``shards`` tries per
    shard, once per process (cached).
    """
    low = -(-shard * CLUSTER_SLOTS // shards) + 1
    high = (shard + 1) * CLUSTER_SLOTS // shards - 1
    base = f"global:{shard}/{shards}"
    tag, tries = base, 0
    while not low <= cluster_slot(tag) < high:
        tries += 1
        tag = f"{base}.{tries}"
    return ShardKey(tag)


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
    if tenant.__class__ is ShardKey:  # one shard of the shared scope
        return f"\1{tenant}"
    if len(tenant) <= PLAIN_TENANT_MAX and tenant.isascii():
        return f"\0{tenant}"
    return "\2" + tenant_digest(tenant)  # as the Redis storage hashes such tenants


def redis_key_base(prefix: str, tenant: str | None) -> str:
    """Everything of a tenant's Redis keys but the quota or limit name: ``quotaql:{t:acme}:``
    (one hash tag per tenant: all its keys share one Redis Cluster slot)."""
    if tenant is None:
        tag = "global"
    elif tenant.__class__ is ShardKey:  # a shard of the shared quotas: its tag
        tag = str(tenant)
    elif _SAFE_TENANT.fullmatch(tenant):
        tag = f"t:{tenant}"
    else:
        # Braces, spaces, unicode, very long keys: hashed, so none can break out of the tag.
        # 128 bits in 22 characters: short keys cost Redis less memory per tenant.
        tag = "h:" + tenant_digest(tenant)
    return f"{prefix}:{{{tag}}}:"


def overflow_network(tenant: str | None) -> str | None:
    """The network whose overflow state an address subject shares once a memory storage's
    table is full: its IPv4 /24 or IPv6 /48 (``"ip:203.0.113.9"`` -> ``"203.0.113.0/24"``,
    ``"ip:2001:db8:1:2::/64"`` -> ``"2001:db8:1::/48"``; a subject already wider, such as
    an IPv6 /32, is its own network). None for any other key: an API key, a user, a
    custom subject, ``anonymous``, the shared scope, or an ``ip:`` key that holds no
    address."""
    if tenant is None or not tenant.startswith(ADDRESS_SUBJECT) or len(tenant) > _ADDRESS_MAX:
        return None
    text = tenant[len(ADDRESS_SUBJECT) :]
    ipv4 = _IPV4.fullmatch(text)  # the common case, without ipaddress's parsing
    if ipv4 is not None:
        return f"{ipv4[1]}.0/24"
    try:
        network = ipaddress.ip_network(text, strict=False)
    except ValueError:
        return None
    prefix = min(network.prefixlen, _OVERFLOW_PREFIX[network.version])
    return str(network.supernet(new_prefix=prefix))


def network_places(
    keys: Sequence[str],
    last_resorts: Sequence[str],
    networks: dict[str, _V],
    overflow: dict[str, _V],
    free: int,
) -> list[tuple[dict[str, _V], str]]:
    """Where each of ``keys`` (a new subject's network keys, one per quota or lease set) is
    decided while a memory table is full: in ``networks`` when it is there already or one
    of the ``free`` places left takes it, else in ``overflow`` under its last resort."""
    places: list[tuple[dict[str, _V], str]] = []
    for k, last in zip(keys, last_resorts, strict=True):
        if k in networks:
            places.append((networks, k))
        elif free > 0:
            free -= 1
            places.append((networks, k))
        else:
            places.append((overflow, last))
    return places


def drop_stale(
    table: dict[str, _V], order: deque[str], stale: Callable[[_V], bool], batch: int
) -> bool:
    """Drop from a full memory table the first entry that no longer matters among the next
    ``batch`` of ``order`` (those that still do go to its end, looked at again after all
    the others): False if none of them could go."""
    for _ in range(min(batch, len(order))):
        k = order.popleft()
        if stale(table[k]):
            del table[k]
            return True
        order.append(k)
    return False
