"""What the limiter tells about its work (decisions, backend errors, the breaker, refunds):
the :class:`Recorder` protocol that metrics and logs implement."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from quotaql.policy.quota import Decision

__all__ = ["MultiRecorder", "NullRecorder", "Recorder"]


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
