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
import os
from typing import Final

from quotaql.storage.keys import overflow_network

__all__ = [
    "SubjectMaxima",
    "class_hash",
    "subject_class",
    "subject_hash",
]

# A secret of this process: which subjects a bounded sample keeps (the smallest hashes) is
# then unknown to a client, who cannot invent subjects that push the others out.
_SECRET: Final = os.urandom(16)


@functools.lru_cache(maxsize=4096)
def subject_class(key: str) -> str:
    """The class ``key`` is counted in: an address subject (``ip:...``) by its network, the
    one a memory storage's overflow shares (:func:`~quotaql.storage.keys.overflow_network`:
    IPv4 /24, IPv6 /48), any other subject as itself.

    Example:
        >>> subject_class("ip:203.0.113.9"), subject_class("ip:2001:db8:1:2::/64")
        ('ip:203.0.113.0/24', 'ip:2001:db8:1::/48')
        >>> subject_class("key:acme")
        'key:acme'
    """
    network = overflow_network(key)
    return key if network is None else f"ip:{network}"


def subject_hash(key: str) -> int:
    """A 64-bit hash of ``key``, keyed by a secret of this process (uniform, and not one a
    client can aim at)."""
    digest = hashlib.blake2b(
        key.encode("utf-8", "surrogatepass"), digest_size=8, key=_SECRET
    ).digest()
    return int.from_bytes(digest, "big")


@functools.lru_cache(maxsize=4096)
def class_hash(subject: str) -> int:
    """:func:`subject_hash` of the class of ``subject``."""
    return subject_hash(subject_class(subject))


_NO_HASH: Final = 1 << 64  # above every 64-bit hash


class SubjectMaxima:
    """The subjects of one period and the largest number each was seen with, at most
    ``kept`` of them: a bottom-k sample (the ``kept`` smallest keyed hashes: a uniform
    sample of the distinct subjects however many there are, and one no client can aim at).
    At most ``2 * kept`` entries while a period fills."""

    __slots__ = ("kept", "maxima", "threshold")

    def __init__(self, kept: int) -> None:
        self.kept = kept
        self.maxima: dict[int, int] = {}
        self.threshold = _NO_HASH
        """Hashes at or above it are out of the sample (it only goes down in a period)."""

    def add(self, who: int, value: int) -> None:
        """``who`` (a :func:`class_hash`) was seen with ``value``."""
        if who >= self.threshold:
            return
        maxima = self.maxima
        known = maxima.get(who)
        if known is None:
            maxima[who] = value
            if len(maxima) >= 2 * self.kept:
                self._keep()
        elif value > known:
            maxima[who] = value

    def _keep(self) -> None:
        """Keep the ``kept`` smallest hashes (amortized: once per as many new subjects)."""
        kept = sorted(self.maxima)[: self.kept + 1]
        if len(kept) > self.kept:
            self.threshold = kept.pop()
        self.maxima = {who: self.maxima[who] for who in kept}

    def close(self) -> list[int]:
        """Each kept subject's largest value, once; a new period starts."""
        if len(self.maxima) > self.kept:
            self._keep()
        values = list(self.maxima.values())
        self.maxima = {}
        self.threshold = _NO_HASH
        return values
