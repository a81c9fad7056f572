"""Sharded shared quotas (``[global] shards = N``, ``Quota(shared=True, shards=N)``).

A shared quota of capacity (or limit) C and rate r is kept as N buckets of C/N and r/N, one
per hash tag (:func:`quotaql.storage.keys.shard_key`: the tags land on N different masters
of a Redis Cluster). A subject's decision debits its **home** shard, picked by a keyed hash
of the subject's key (stable: every worker of the fleet picks the same); a refusal there
(``rate_limited``: the shard is empty, not the cost too large for any) is tried again on the
subject's **second** shard, once, from the same hash (any of the N - 1 others, so that the
subjects of one drained shard go on to different ones). A refund or an overage charge goes
to the shard that was debited: the second shard's statuses in a decision are
:class:`RetriedStatus`, and the limiter names that shard on the refund's quotas
(``Quota.shard``), which the refund queue carries as it is.

No window of T seconds admits more than C + r·T in all (each shard at most C/N + r/N·T):
sharding never admits more than the one bucket; what it gives up is that a subject sees
two shards of N, not the whole (docs/scale-out.md, "Sharded shared quotas").
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import replace
from typing import TYPE_CHECKING, Final

from quotaql.policy.quota import Decision, QuotaStatus
from quotaql.storage.keys import shard_key

if TYPE_CHECKING:
    from collections.abc import Sequence

    from quotaql.policy.quota import Quota
    from quotaql.storage.base import Debit

__all__ = [
    "RetriedStatus",
    "SparedStatus",
    "homes",
    "pinned",
    "pinned_to_decision",
    "refused_here",
    "retried",
    "shard_debit",
    "shard_taken",
    "spared",
]

# The key of the subjects' hash. Fixed, so that every worker (and every version) puts a
# subject on the same shards; what knowing it gives an attacker is bounded (the module).
_HASH_KEY: Final = b"quotaql/shards/1"


class RetriedStatus(QuotaStatus):
    """A shared quota's status from the subject's second shard (its home one refused):
    a refund or an overage of the decision goes there."""

    __slots__ = ()


class SparedStatus(QuotaStatus):
    """A shared quota's status in a refusal made without a call: the subject's shards were
    remembered empty (the status is the remembered refusal's)."""

    __slots__ = ()


def shard_taken(decision: Decision) -> str | None:
    """Which of its subject's shards ``decision``'s sharded shared quotas were decided on,
    for the operation's span: ``second``, ``spared`` (refused without a call), or None
    (the home shard, or no sharded quota: the statuses do not tell them apart)."""
    for status in decision.quotas:
        if status.__class__ is RetriedStatus:
            return "second"
        if status.__class__ is SparedStatus:
            return "spared"
    return None


def spared(decision: Decision, cost: float) -> Decision:
    """``decision`` (a shard's remembered refusal) as the answer to ``cost`` now, its
    statuses marked as made without a call."""
    marked = tuple(SparedStatus(*status) for status in decision.quotas)
    return decision._replace(cost=cost, quotas=marked)


def homes(subject: str, shards: int) -> tuple[int, int]:
    """The home shard of ``subject`` and its second one (the same when ``shards`` is 1):
    64 bits of a keyed BLAKE2b of its key, modulo ``shards`` for the home, and the rest of
    them choosing among the ``shards - 1`` others."""
    if shards == 1:
        return 0, 0
    digest = hashlib.blake2b(
        subject.encode("utf-8", "surrogatepass"), digest_size=8, key=_HASH_KEY
    ).digest()
    value = int.from_bytes(digest, "big")
    home = value % shards
    return home, (home + 1 + (value // shards) % (shards - 1)) % shards


@functools.lru_cache(maxsize=4096)
def _shard_quotas(quotas: tuple[Quota, ...], shard: int) -> list[Quota]:
    """``quotas``' shard ``shard``: each with a ``shards``-th of its capacity (or limit)
    and rate (built once per set of quotas and shard: ``replace`` checks a quota anew)."""
    placed = []
    for quota in quotas:
        n = quota.shards
        unpinned = quota if quota.shard is None else replace(quota, shard=None)
        if quota.capacity is not None:
            rate = (quota.refill_per_second or 0.0) / n
            placed.append(
                replace(unpinned, capacity=quota.capacity / n, refill_per_second=rate, shard=shard)
            )
        else:
            placed.append(replace(unpinned, limit=(quota.limit or 0.0) / n, shard=shard))
    return placed


def pinned(quotas: Sequence[Quota]) -> int | None:
    """The shard a refund's (or a charge's) shared quotas name, or None (the home one)."""
    for quota in quotas:
        if quota.shared and quota.shard is not None:
            return quota.shard
    return None


def shard_debit(shared: Debit, subject: str | None, *, second: bool = False) -> Debit | None:
    """``shared`` (the shared quotas' part of a debit, in the shared scope) on the shard it
    goes to: the one its quotas name, else ``subject``'s home (or its ``second``). None
    when there is no other shard to try (one shard, or the shard was named)."""
    quotas = shared.quotas
    shards = quotas[0].shards
    named = pinned(quotas)
    if second and (shards == 1 or named is not None or subject is None):
        return None
    if named is not None:
        shard = named
    else:
        home, other = homes(subject or "", shards)
        shard = other if second else home
    return shared._replace(key=shard_key(shard, shards), quotas=_shard_quotas(tuple(quotas), shard))


def retried(decision: Decision) -> Decision:
    """``decision`` (a second shard's) with its statuses marked as that shard's."""
    marked = tuple(RetriedStatus(*status) for status in decision.quotas)
    return decision._replace(quotas=marked)


def pinned_to_decision(debit: Debit, decision: Decision | None) -> Debit:
    """``debit`` (a refund or an overage of ``decision``'s debit) with its shared quotas
    naming the shard ``decision`` debited them on when it was the subject's second (a
    refund or a charge then goes there); else ``debit`` as it is (the home shard)."""
    if decision is None or not any(s.__class__ is RetriedStatus for s in decision.quotas):
        return debit
    quotas = debit.quotas
    shards = next((quota.shards for quota in quotas if quota.shared), 1)
    if shards == 1 or debit.key is None:
        return debit
    second = homes(debit.key, shards)[1]
    return debit._replace(
        quotas=[
            replace(quota, shard=second) if quota.shared and quota.shard is None else quota
            for quota in quotas
        ]
    )


def refused_here(decision: Decision) -> bool:
    """Whether a shard's refusal may be tried on another shard: it is empty (rate limited),
    not asked for more than any shard holds."""
    return not decision.allowed and decision.reason == "rate_limited"
