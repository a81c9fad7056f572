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
from quotaql.gate.operation import concurrency_wait
from quotaql.gate.settle import restore_rate

if TYPE_CHECKING:
    from collections.abc import Sequence

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


def _reply(op: Operation) -> _Reply:
    decision = op.decision
    headers = op.headers
    ran = op.error is None
    if decision is None or not headers:
        wait = concurrency_wait(op) if decision is None else None
        return _Reply(op.status, ran, op.code, headers, math.inf, wait or 0.0)
    wait = decision.retry_after or 0.0
    return _Reply(op.status, ran, op.code, headers, decision.remaining, wait)


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
        or for a subscription)."""
        if response is None or op.operation_type == "subscription" or web.is_websocket(response):
            return
        replies = self._add(response, _reply(op))
        status, headers = _answer(replies)
        if status is not None:
            web.set_status(response, status)
        web.set_headers(response, headers, remove=("Retry-After",) if len(replies) > 1 else ())

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


def extensions(op: Operation | None, expose_cost: bool) -> dict[str, Any]:
    """The response's ``extensions`` for ``op``: ``{"cost": ...}`` when ``expose_cost`` (or
    the ``GraphQL-Cost`` header asked), and ``{"warnings": [...]}`` when ``GraphQL-Cost:
    validate`` priced it above a quota's capacity; else empty."""
    if op is None or op.report is None or (not expose_cost and op.header is None):
        return {}
    restore = restore_rate(op.quotas[0]) if op.quotas else None
    found: dict[str, Any] = {
        "cost": cost_extension(op.cost, op.actual, op.decision, restore, op.breakdown)
    }
    if op.warnings:
        found["warnings"] = op.warnings
    return found
