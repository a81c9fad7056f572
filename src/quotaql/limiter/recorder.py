"""What the limiter tells about its work (decisions, backend errors, the breaker, refunds):
the :class:`Recorder` protocol that metrics and logs implement."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable

    from quotaql.policy.quota import Decision

__all__ = ["MultiRecorder", "NullRecorder", "Recorder", "decision_hook"]


class Recorder(Protocol):
    """Receives what the limiter does, for metrics and logs (see ``quotaql.instrumentation``)."""

    def decision(self, decision: Decision, seconds: float) -> None:
        """A decision was made in ``seconds`` (including storage round trips)."""

    def backend_error(self, backend: str, error: BaseException) -> None:
        """A storage call failed (the decision then came from the fail mode)."""

    def circuit(self, backend: str, is_open: bool) -> None:
        """The circuit breaker opened (``True``) or closed again (``False``)."""

    # Optional (a recorder without it is not told): ``refunds(outcome, count, cost)``, where
    # outcome is ``applied``, ``lost`` or ``unknown`` (see :mod:`quotaql.limiter.refunds`).


class NullRecorder:
    """Records nothing: the default."""

    def decision(self, decision: Decision, seconds: float) -> None:
        """Ignore the decision."""

    def backend_error(self, backend: str, error: BaseException) -> None:
        """Ignore the error."""

    def circuit(self, backend: str, is_open: bool) -> None:
        """Ignore the change."""

    def refunds(self, outcome: str, count: int, cost: float) -> None:
        """Ignore the refunds."""


class MultiRecorder:
    """Passes everything on to several recorders (metrics and logs, say), in order."""

    def __init__(self, *recorders: Recorder) -> None:
        self.recorders = recorders

    def decision(self, decision: Decision, seconds: float) -> None:
        """Pass the decision on."""
        for recorder in self.recorders:
            recorder.decision(decision, seconds)

    def backend_error(self, backend: str, error: BaseException) -> None:
        """Pass the error on."""
        for recorder in self.recorders:
            recorder.backend_error(backend, error)

    def circuit(self, backend: str, is_open: bool) -> None:
        """Pass the change on."""
        for recorder in self.recorders:
            recorder.circuit(backend, is_open)

    def refunds(self, outcome: str, count: int, cost: float) -> None:
        """Pass the refunds on (to the recorders that take them)."""
        for recorder in self.recorders:
            told = getattr(recorder, "refunds", None)
            if told is not None:
                told(outcome, count, cost)

    def shard_calls(self, outcome: str, shard: int | None, count: int) -> None:
        """Pass the shard calls on (to the recorders that count them)."""
        for recorder in self.recorders:
            told = getattr(recorder, "shard_calls", None)
            if told is not None:
                told(outcome, shard, count)


def decision_hook(recorder: Recorder) -> Callable[[Decision, float], None] | None:
    """What a limiter tells each of its decisions (and how long it took) to: ``recorder``'s
    ``decision``; None when nobody listens (a :class:`NullRecorder`, whose decisions are
    not even timed, or a :class:`MultiRecorder` whose recorders all ignore them). Of a
    :class:`MultiRecorder` whose recorders but one ignore decisions (the gate's: its logs and
    its metrics), that one's ``decision``: the others would only be called to do nothing."""
    if isinstance(recorder, NullRecorder):
        return None
    if type(recorder) is not MultiRecorder:
        return recorder.decision
    listening = [
        told.decision
        for told in recorder.recorders
        if getattr(told.decision, "__func__", None) is not NullRecorder.decision
    ]
    if not listening:
        return None
    return listening[0] if len(listening) == 1 else recorder.decision
