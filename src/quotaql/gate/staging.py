"""Staged enforcement (``enforce_share``): of an ``enforce`` tier's subjects, a stable share is
enforced and the others run in shadow.

A subject's *place* is a number in [0, 1): a BLAKE2b hash of the tier's name and the subject,
keyed with :data:`PLACE_KEY` (fixed and published, so that every worker, every server and every
restart agrees). The subject is enforced when its place is below the tier's share, so raising
the share only ever adds subjects, and a share of 1 enforces everyone without hashing anything.

What is hashed is the subject the budgets are kept for (``Subject.key``: ``key:<tenant>``,
``user:<id>``, ...), with an address subject taken by its network, as the tuning metrics count
subjects (:func:`~quotaql.instrumentation.subjects.subject_class`: an IPv4 address by its
/24, an IPv6 /64 by its /48): a client rotating through the addresses of its network keeps
one place, so it cannot go looking for an address in the shadow part. Nothing else a client
sends changes the place: not the operation, not its name, not the spelling of the API key's
header, not a principal beside a known key, not an ``X-Forwarded-For`` that no trusted proxy
wrote. A client that owns many networks can find one in the shadow part, as it can find a fresh
budget with each of them anyway.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Final, Literal

from quotaql.gate.operation import Operation
from quotaql.instrumentation.subjects import subject_class
from quotaql.policy.modes import Mode

if TYPE_CHECKING:
    from quotaql.config import Config, TierConfig
    from quotaql.gate.operation import CostHeader
    from quotaql.identity import Subject

__all__ = ["ENFORCED", "PLACE_KEY", "SHADOW", "Staged", "operation", "place", "staged"]

PLACE_KEY: Final = b"quotaql.enforce_share.v1"
"""The BLAKE2b key of every subject's place (documented: docs/tuning.md). It is not a secret:
a place must be the same in every process, and nothing is gained by guessing one (a subject
cannot choose what it is hashed as)."""

#: What staged enforcement made of an operation: its subject is in the enforced share, or in
#: the rest, which runs in shadow (the ``enforced`` label of ``quotaql_staged_total``).
Staged = Literal["enforced", "shadow"]
ENFORCED: Final[Staged] = "enforced"
SHADOW: Final[Staged] = "shadow"

_SCALE: Final = float(1 << 64)


def place(tier: str, subject: str) -> float:
    """``subject``'s place among ``tier``'s subjects, in [0, 1): enforced when below the share.

    Example:
        >>> place("free", "key:acme") == place("free", "key:acme")
        True
        >>> place("free", "ip:203.0.113.9") == place("free", "ip:203.0.113.200")  # one /24
        True
    """
    who = subject_class(subject)
    message = f"{len(tier)}:{tier}:{who}".encode("utf-8", "surrogatepass")
    digest = hashlib.blake2b(message, digest_size=8, key=PLACE_KEY).digest()
    return int.from_bytes(digest, "big") / _SCALE


def staged(share: float, tier: str, subject: str) -> Staged:
    """Whether ``subject`` of ``tier`` is enforced under ``share`` (below 1)."""
    return ENFORCED if share > 0.0 and place(tier, subject) < share else SHADOW


def operation(
    config: Config, subject: Subject, tier: TierConfig, header: CostHeader | None
) -> Operation:
    """The operation of ``subject`` in ``tier``, in the tier's mode, or in shadow mode for a
    subject of an ``enforce`` tier outside its ``enforce_share`` (then :attr:`Operation.staged`
    says so)."""
    mode = tier.mode or config.limits.mode
    share = config.enforce_share_of(tier) if mode is Mode.ENFORCE else 1.0
    if share >= 1.0:  # everyone: the common case, nothing hashed
        return Operation(subject, tier, mode, header, config)
    where = staged(share, tier.name, subject.key)
    op = Operation(
        subject, tier, Mode.ENFORCE if where == ENFORCED else Mode.SHADOW, header, config
    )
    op.staged = where
    return op
