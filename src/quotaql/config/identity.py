"""The ``[identity]`` table of ``quotaql.toml``: where the subject of a request comes from."""

from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass, field
from typing import Final, Literal, get_args

from quotaql.errors import ConfigError

__all__ = [
    "FORWARDED_HEADERS",
    "MAX_HOPS",
    "MAX_RESOLVER_BURST",
    "UNKNOWN_KEY_MODES",
    "ForwardedHeader",
    "IdentityConfig",
    "UnknownKeys",
]

#: What an unknown API key counts as: its client's address, a refusal, or a tenant anyway.
UnknownKeys = Literal["address", "reject", "tenant"]
UNKNOWN_KEY_MODES: Final[tuple[UnknownKeys, ...]] = get_args(UnknownKeys)
#: Which proxy header the proxies in front of the server write.
ForwardedHeader = Literal["x-forwarded-for", "forwarded"]
FORWARDED_HEADERS: Final[tuple[ForwardedHeader, ...]] = get_args(ForwardedHeader)
# Proxy headers are read from the right; more entries than this are never looked at, so a
# hostile header of thousands of entries costs what a short one does.
MAX_HOPS: Final = 32
#: The most ``resolver_burst`` says (a billion lookups at once bound nothing; past a float's
#: range a bucket could not hold it).
MAX_RESOLVER_BURST: Final = 1_000_000_000


@dataclass(frozen=True, slots=True)
class IdentityConfig:
    """The ``[identity]`` table of ``quotaql.toml``: where subjects come from.

    Attributes:
        api_key_header: the request header that carries the API key.
        unknown_keys: what a key that is neither in ``[tenants]`` nor accepted by the
            ``key_resolver`` counts as: ``"address"`` (its client's address, the default),
            ``"reject"`` (``UNKNOWN_API_KEY``, HTTP 401; the address pays one point for
            the attempt) or ``"tenant"`` (a tenant of its own: every new key is a fresh
            budget, so unsafe on a public API).
        trusted_proxies: CIDRs of the proxies in front of the server (default none). Only
            a request whose socket peer is one of them has its proxy header read.
        trusted_hops: a fixed number of proxies in front of the server: the client is the
            address this many entries from the right of the proxy header (0: walk it and
            skip ``trusted_proxies`` instead). With ``trusted_proxies`` set too, the peer
            must be one of them.
        forwarded_header: which proxy header the proxies write: ``"x-forwarded-for"``
            (nginx, cloud load balancers, Kubernetes ingresses) or ``"forwarded"`` (RFC
            7239). Only that one is read: a client could send the other one itself.
        ipv6_prefix: IPv6 clients are limited per network of this prefix length (one
            host usually owns a whole /64); 128 limits each address.
        resolver_rate: the ``key_resolver`` lookups one client address (IPv6: its
            ``ipv6_prefix`` network) may cause per second, in each process, after its
            ``resolver_burst``: a key that would need one more counts as its client's
            address, without a lookup. Its network (IPv4 /24, IPv6 /48) may cause 8 times as
            many, one budget for all its addresses. Answers in the cache, and keys the
            resolver accepted before (revalidated when their cache entry expires), need none.
        resolver_burst: the lookups an address may cause at once before ``resolver_rate``
            applies.
    """

    api_key_header: str = "x-api-key"
    unknown_keys: UnknownKeys = "address"
    trusted_proxies: tuple[str, ...] = ()
    trusted_hops: int = 0
    forwarded_header: ForwardedHeader = "x-forwarded-for"
    ipv6_prefix: int = 64
    resolver_rate: float = 2.0
    resolver_burst: int = 20
    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        if not isinstance(self.api_key_header, str) or not _is_token(self.api_key_header):
            raise ConfigError(
                f"api_key_header must be an HTTP header name, got {self.api_key_header!r}"
            )
        object.__setattr__(self, "api_key_header", self.api_key_header.lower())
        if self.unknown_keys not in UNKNOWN_KEY_MODES:
            raise ConfigError(
                f"unknown_keys must be one of {', '.join(UNKNOWN_KEY_MODES)},"
                f" got {self.unknown_keys!r}"
            )
        if self.forwarded_header not in FORWARDED_HEADERS:
            raise ConfigError(
                f"forwarded_header must be one of {', '.join(FORWARDED_HEADERS)},"
                f" got {self.forwarded_header!r}"
            )
        hops = self.trusted_hops
        if isinstance(hops, bool) or not isinstance(hops, int) or not 0 <= hops <= MAX_HOPS:
            raise ConfigError(f"trusted_hops must be an integer from 0 to {MAX_HOPS}, got {hops!r}")
        prefix = self.ipv6_prefix
        if isinstance(prefix, bool) or not isinstance(prefix, int) or not 1 <= prefix <= 128:
            raise ConfigError(f"ipv6_prefix must be an integer from 1 to 128, got {prefix!r}")
        rate = self.resolver_rate
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 < rate < math.inf:
            raise ConfigError(f"resolver_rate must be a finite number above 0, got {rate!r}")
        object.__setattr__(self, "resolver_rate", float(rate))
        burst = self.resolver_burst
        if (
            isinstance(burst, bool)
            or not isinstance(burst, int)
            or not 1 <= burst <= MAX_RESOLVER_BURST
        ):
            raise ConfigError(
                f"resolver_burst must be an integer from 1 to {MAX_RESOLVER_BURST}, got {burst!r}"
            )
        proxies: object = self.trusted_proxies
        if isinstance(proxies, str) or not isinstance(proxies, list | tuple):
            raise ConfigError(f"trusted_proxies must be a list of CIDRs, got {proxies!r}")
        networks = []
        for cidr in proxies:
            try:
                networks.append(ipaddress.ip_network(cidr, strict=False))
            except (TypeError, ValueError) as error:
                raise ConfigError(
                    f"trusted_proxies: {cidr!r} is not an IP network such as 10.0.0.0/8"
                    f" or 2001:db8::/32 ({error})"
                ) from None
        object.__setattr__(self, "trusted_proxies", tuple(str(cidr) for cidr in proxies))
        object.__setattr__(self, "networks", tuple(networks))

    def trusts(self, address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
        """Is ``address`` one of the trusted proxies?"""
        return any(address in network for network in self.networks)


def _is_token(name: str) -> bool:
    return bool(name) and all(c.isalnum() or c in "-_" for c in name)
