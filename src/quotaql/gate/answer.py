"""The answer of one HTTP response that several operations share (a batch): its status and
headers say what all of them did."""

from __future__ import annotations

import math
import threading
import weakref
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, NamedTuple

from quotaql import web
from quotaql.contract import RATE_LIMITED, TOO_MANY_CONCURRENT, cost_extension
from quotaql.gate import warn
from quotaql.gate.operation import concurrency_wait
from quotaql.gate.settle import restore_rate
from quotaql.policy.numbers import is_whole

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from quotaql.gate.operation import Operation

__all__ = ["BatchAnswers", "extensions"]


class _Reply(NamedTuple):
    """What one operation answers for the HTTP response it shares with a batch."""

    status: int | None  # a limiter's refusal, else None
    ran: bool  # not refused (by the limiter or by the analysis)
    code: str | None
    headers: dict[str, str]
    remaining: float  # of the quota the headers describe (inf: no decision)
    wait: float  # seconds until a refusal would pass
    # What it adds to the cost headers (gate/warn.py cost_values): its estimated cost, its
    # actual cost, and whether it ran with its actual cost unknown.
    costs: tuple[float | None, float | None, bool] = (None, None, False)


def _reply(op: Operation) -> _Reply:
    decision = op.decision
    headers = op.headers
    ran = op.error is None
    costs = warn.cost_values(op)
    if decision is None or "RateLimit" not in headers:
        wait = concurrency_wait(op) if decision is None else None
        return _Reply(op.status, ran, op.code, headers, math.inf, wait or 0.0, costs)
    wait = decision.retry_after or 0.0
    return _Reply(op.status, ran, op.code, headers, decision.remaining, wait, costs)


#: The refusals a client gets past by waiting (their Retry-After answers a batch).
_WAITING_HELPS = frozenset({RATE_LIMITED, TOO_MANY_CONCURRENT})


class BatchAnswers:
    """The operations that share one HTTP response (a batch), so that its status and headers
    say what all of them did: 200 when any ran, a refusal only when every one was refused.

    Kept by weak reference to the response (gone with it); a response that takes no weak
    references (Litestar's) is kept, with its replies, among the last ``_STRONG`` such
    responses, which bounds the memory and keeps its ``id`` from being reused meanwhile.
    """

    _STRONG = 256

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._weak: weakref.WeakKeyDictionary[Any, list[_Reply]] = weakref.WeakKeyDictionary()
        self._strong: OrderedDict[int, tuple[Any, list[_Reply]]] = OrderedDict()

    def respond(self, op: Operation, response: Any) -> None:
        """Write ``op``'s status and rate-limit headers on the framework's ``response``,
        with those of the operations that answered in it before (nothing on a websocket,
        or for a subscription): its ``warn_at`` warning, and the cost headers
        (``[limits] cost_headers``: a batch sends the sums of its operations')."""
        if response is None or op.operation_type == "subscription" or web.is_websocket(response):
            return
        replies = self._add(response, _reply(op))
        status, headers = _answer(replies)
        if status is not None:
            web.set_status(response, status)
        remove: tuple[str, ...] = ("Retry-After",) if len(replies) > 1 else ()
        names = op.cost_names
        if names is not None:  # quotaql's names: nobody else's value goes out under them
            headers = {**headers, **_summed(replies, names)}
            remove = (*remove, *names.values())
        web.set_headers(response, headers, remove=remove)

    def _add(self, response: Any, reply: _Reply) -> list[_Reply]:
        with self._lock:
            try:
                replies = self._weak.setdefault(response, [])
            except TypeError:
                entry = self._strong.get(id(response))
                if entry is None or entry[0] is not response:
                    entry = self._strong[id(response)] = (response, [])
                    if len(self._strong) > self._STRONG:
                        self._strong.popitem(last=False)
                replies = entry[1]
            replies.append(reply)
            return list(replies)


def _answer(replies: Sequence[_Reply]) -> tuple[int | None, dict[str, str]]:
    """The status and headers of a response that the operations of ``replies`` share."""
    if len(replies) == 1:
        return replies[0].status, replies[0].headers
    refused = [reply for reply in replies if not reply.ran]
    tightest = min(replies, key=lambda reply: (reply.remaining, -reply.wait))
    if len(refused) < len(replies):  # something ran: the response is a success
        status = 200 if any(reply.status is not None for reply in refused) else None
        headers = {k: v for k, v in tightest.headers.items() if k != "Retry-After"}
        return status, headers
    limited = [reply for reply in refused if reply.code in _WAITING_HELPS]
    if limited:  # waiting helps: answer the longest wait of them
        longest = max(limited, key=lambda reply: reply.wait)
        return longest.status, longest.headers
    status = next((reply.status for reply in refused if reply.status is not None), None)
    return status, tightest.headers


def _summed(replies: Sequence[_Reply], names: Mapping[str, str]) -> dict[str, str]:
    """The cost headers of the operations of ``replies``: the sum of the estimated costs of
    those priced, and of the actual costs of those that ran, when every one that ran has
    its actual cost (a refused one ran nothing: it adds none)."""
    if len(replies) == 1:
        estimated, actual, _ = replies[0].costs
        return warn.cost_headers(names, estimated, actual)
    estimates = [reply.costs[0] for reply in replies if reply.costs[0] is not None]
    actuals = [reply.costs[1] for reply in replies if reply.costs[1] is not None]
    unknown = any(reply.costs[2] for reply in replies)
    return warn.cost_headers(
        names,
        math.fsum(estimates) if estimates else None,
        math.fsum(actuals) if actuals and not unknown else None,
    )


def extensions(op: Operation | None, expose_cost: bool) -> dict[str, Any]:
    """The response's ``extensions`` for ``op``: ``{"cost": ...}`` when ``expose_cost`` (or
    the ``GraphQL-Cost`` header asked), with its ``warning`` when ``warn_at`` warns, and
    ``{"warnings": [...]}`` when ``GraphQL-Cost: validate`` priced it above a quota's
    capacity; else empty."""
    if op is None or op.report is None or (not expose_cost and op.header is None):
        return {}
    caution = warn.caution_of(op)
    restore = restore_rate(op.quotas[0]) if op.quotas else None
    cost = cost_extension(op.cost, op.actual, op.decision, restore, op.breakdown)
    if caution is not None:
        cost["warning"] = caution.extension(is_whole(op.cost))
    found: dict[str, Any] = {"cost": cost}
    if op.warnings:
        found["warnings"] = op.warnings
    return found
