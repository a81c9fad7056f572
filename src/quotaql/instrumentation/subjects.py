"""Subject classes: who pays, grouped as far as one hand can cheaply hold many subjects.

The tuning metrics and the adaptive limits count *subjects*, so that a few clients cannot
pass for many: a client that sends more requests weighs no more. But one client may hold
many addresses: an IPv4 /24 costs little, and an IPv6 /48 (a common allocation) holds 65,536
of the /64 networks the identity counts as subjects. So these counts group addresses by
network: an IPv4 address by its /24, an IPv6 network or address by its /48. API keys,
principals and custom identities are subjects of their own (a key is handed out, not
invented).
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import os
from typing import Final

__all__ = ["IPV4_CLASS_PREFIX", "IPV6_CLASS_PREFIX", "subject_class", "subject_hash"]

IPV4_CLASS_PREFIX: Final = 24
"""IPv4 subjects are counted by this network (``ip:203.0.113.9`` is ``ip:203.0.113.0/24``)."""
IPV6_CLASS_PREFIX: Final = 48
"""IPv6 subjects are counted by this network (``ip:2001:db8:1:2::/64`` is
``ip:2001:db8:1::/48``)."""

# A secret of this process: which subjects a bounded sample keeps (the smallest hashes) is
# then unknown to a client, who cannot invent subjects that push the others out.
_SECRET: Final = os.urandom(16)


@functools.lru_cache(maxsize=4096)
def subject_class(key: str) -> str:
    """The class ``key`` is counted in: an address subject (``ip:...``) by its network
    (:data:`IPV4_CLASS_PREFIX`, :data:`IPV6_CLASS_PREFIX`), any other subject as itself.

    Example:
        >>> subject_class("ip:203.0.113.9"), subject_class("ip:2001:db8:1:2::/64")
        ('ip:203.0.113.0/24', 'ip:2001:db8:1::/48')
        >>> subject_class("key:acme")
        'key:acme'
    """
    if not key.startswith("ip:"):
        return key
    try:
        network = ipaddress.ip_network(key[3:], strict=False)
    except ValueError:  # no address (the identity keeps what it could not parse): as it is
        return key
    prefix = IPV4_CLASS_PREFIX if network.version == 4 else IPV6_CLASS_PREFIX
    if network.prefixlen <= prefix:
        return f"ip:{network}"
    return f"ip:{network.supernet(new_prefix=prefix)}"


def subject_hash(key: str) -> int:
    """A 64-bit hash of ``key``, keyed by a secret of this process (uniform, and not one a
    client can aim at)."""
    digest = hashlib.blake2b(
        key.encode("utf-8", "surrogatepass"), digest_size=8, key=_SECRET
    ).digest()
    return int.from_bytes(digest, "big")
