"""Structured, rate-limited log records a person can read: an attack must not be able to
flood the logs, nor one subject crowd out the lines of others.

Every record goes to the ``quotaql`` logger with its fields as ``extra`` (``quotaql_event``
says what happened; docs/logging.md lists every event and its fields).
Each event kind may log ``burst`` records at once and ``per_second`` on average, and each
subject (a tenant, a user, an address) ``subject_burst`` records of one kind at once and
``subject_per_second`` on average, tracked for the ``subjects`` subjects seen last (a
bounded map: a flood of new subjects evicts the oldest, and the per-event limit still
holds). The records either limit drops are counted and the next record of the kind that
passes says how many (``suppressed``).

:class:`JsonFormatter` writes each record as one JSON object with its fields: the
formatter of the recipe in docs/logging.md (``uvicorn --log-config``).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import warnings
from collections import OrderedDict
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from quotaql.instrumentation import names
from quotaql.limiter import NullRecorder

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "JsonFormatter",
    "LogRecorder",
    "LoggingWarning",
    "StructuredLog",
    "clipped",
    "unseen_warnings",
    "warn_if_unseen",
]

logger = logging.getLogger(names.LOGGER)

_MAX_TEXT = 200  # a client's text (a name, an error message) in a line: at most this long


def clipped(text: str, limit: int = _MAX_TEXT) -> str:
    """``text`` as a log line may show it: control characters escaped (a client cannot
    forge a line), at most ``limit`` characters (then ``...``)."""
    if len(text) > limit:
        text = text[:limit] + "..."
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


class StructuredLog:
    """Log records with ``extra`` fields, at most ``per_second`` per event kind (burst
    ``burst``), and of those at most ``subject_per_second`` per subject (burst
    ``subject_burst``), so that one subject's flood leaves room for the others' lines.

    Args:
        per_second: the average rate each event kind may log at.
        burst: how many records of one kind may pass at once.
        subject_per_second: the average rate one subject's records of one kind may log at.
        subject_burst: how many records of one kind one subject may log at once.
        subjects: how many (event, subject) budgets are kept (the least recently used go
            first): the memory a flood of new subjects can take.
        clock: seconds from a monotonic clock (tests inject their own).
        target: the logger (``quotaql``). When it was created, if its WARNING records
            would reach no handler, a :class:`LoggingWarning` says so, once per process.
    """

    def __init__(
        self,
        per_second: float = 5.0,
        burst: float = 20.0,
        *,
        subject_per_second: float = 0.2,
        subject_burst: float = 5.0,
        subjects: int = 4096,
        clock: Callable[[], float] = time.monotonic,
        target: logging.Logger = logger,
    ) -> None:
        if subjects < 1:
            raise ValueError(f"subjects must be >= 1, got {subjects}")
        self.per_second = per_second
        self.burst = burst
        self.subject_per_second = subject_per_second
        self.subject_burst = subject_burst
        self.subjects = subjects
        self._clock = clock
        self._logger = target
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float, int]] = {}  # tokens, at, suppressed
        # (event, hash of the subject): tokens, at. Hashes, not the keys: an entry's size
        # does not grow with a hostile key's length (the hash is salted per process).
        self._theirs: OrderedDict[tuple[str, int], tuple[float, float]] = OrderedDict()
        warn_if_unseen(target)

    def log(
        self,
        level: int,
        event: str,
        message: str,
        *args: object,
        subject: str | None = None,
        **fields: Any,
    ) -> bool:
        """Log ``message % args`` with ``fields`` as ``extra``; False when rate-limited
        (for ``event``, or for ``subject``'s records of it)."""
        suppressed = self.take(level, event, subject)
        if suppressed is None:
            return False
        self.emit(level, event, suppressed, message, *args, **fields)
        return True

    def take(self, level: int, event: str, subject: str | None = None) -> int | None:
        """Room for one record of ``event`` (about ``subject``) now: how many were
        suppressed before it, or None (disabled, or rate-limited: counted as suppressed).
        For callers whose fields cost something to build: build them only then, and
        :meth:`emit`."""
        if not self._logger.isEnabledFor(level):
            return None
        now = self._clock()
        with self._lock:
            tokens, at, suppressed = self._buckets.get(event, (self.burst, now, 0))
            tokens = min(self.burst, tokens + (now - at) * self.per_second)
            room = tokens >= 1
            if subject is not None:
                room = self._their_room(event, subject, now, room)
            if not room:
                self._buckets[event] = (tokens, now, suppressed + 1)
                return None
            self._buckets[event] = (tokens - 1, now, 0)
        return suppressed

    def _their_room(self, event: str, subject: str, now: float, room: bool) -> bool:
        """Whether ``subject`` has room for one more record of ``event`` (taken if so and
        the event has ``room``): its budget refilled, moved to the most recent end."""
        theirs = self._theirs
        key = (event, hash(subject))
        state = theirs.pop(key, None)
        if state is None:
            tokens = self.subject_burst
            if len(theirs) >= self.subjects:
                theirs.popitem(last=False)  # the least recently seen subject
        else:
            tokens = min(self.subject_burst, state[0] + (now - state[1]) * self.subject_per_second)
        if tokens < 1:
            room = False
        elif room:
            tokens -= 1
        theirs[key] = (tokens, now)
        return room

    def emit(
        self, level: int, event: str, suppressed: int, message: str, *args: object, **fields: Any
    ) -> None:
        """Write the record :meth:`take` made room for."""
        if suppressed:
            message += " (%d similar records suppressed)"
            args = (*args, suppressed)
        extra = {names.LOG_EVENT: event, "suppressed": suppressed, **fields}
        self._logger.log(level, message, *args, extra=extra)


class LogRecorder(NullRecorder):
    """The limiter's recorder for logs: backend errors and breaker changes (not decisions).

    A :class:`~quotaql.limiter.NullRecorder` underneath, so a limiter with only this
    recorder does not time its decisions.
    """

    def __init__(self, log: StructuredLog | None = None) -> None:
        self.log = log or StructuredLog()

    def backend_error(self, backend: str, error: BaseException) -> None:
        """Log a failed storage call."""
        self.log.log(
            logging.WARNING,
            "backend_error",
            "quotaql: the %s storage failed (%s: %s); the fail mode answers",
            backend,
            type(error).__name__,
            error,
            backend=backend,
            error_type=type(error).__name__,
        )

    def refunds(self, outcome: str, count: int, cost: float) -> None:
        """Log deferred refunds dropped: ``lost`` (never applied: Redis was out longer than
        ``refund_max_age``, or the queue was full) or ``unknown`` (sent, then the call
        failed; perhaps applied, never sent twice)."""
        if outcome == "applied" or not count:
            return
        self.log.log(
            logging.WARNING,
            "refunds_lost",
            "quotaql: %d refunds (%s points) were dropped (%s): their tenants paid up to that"
            " much more than they used",
            count,
            f"{cost:g}",
            outcome,
            outcome=outcome,
            count=count,
            cost=cost,
        )

    def circuit(self, backend: str, is_open: bool) -> None:
        """Log the breaker opening or closing."""
        if is_open:
            self.log.log(
                logging.WARNING,
                "circuit_opened",
                "quotaql: circuit opened in front of the %s storage; calls stop for a cool-down",
                backend,
                backend=backend,
            )
        else:
            self.log.log(
                logging.INFO,
                "circuit_closed",
                "quotaql: circuit closed; the %s storage answers again",
                backend,
                backend=backend,
            )


# -- JSON lines ---------------------------------------------------------------------------

# What every LogRecord holds: not a field of the event (``extra`` adds the others).
_RECORD_ATTRIBUTES = frozenset(
    (*logging.LogRecord("", 0, "", 0, "", (), None).__dict__, "message", "asctime", "taskName")
)
# uvicorn's records repeat their message with terminal colours: not a field worth a column.
_SKIPPED = frozenset({"color_message"})


class JsonFormatter(logging.Formatter):
    """Each record as one JSON object on one line, with every field the record was logged
    with (``extra``): ``time`` (ISO 8601, UTC, to the millisecond), ``level``, ``logger``,
    ``message``, then the fields (a quotaql record's ``quotaql_event``, ``tenant``,
    ``tier``, ``cost``, ...), and ``exception`` when there is one.

    Standard formatters (``%(message)s``) drop what ``extra`` adds; this one keeps it, for a
    log pipeline to index. A field JSON cannot hold is written as its ``str()``. It takes
    ``logging.Formatter``'s arguments (a ``dictConfig`` passes ``format``, ``datefmt``
    and ``style``), and ignores them: its lines have one shape.

    Example:
        >>> import logging
        >>> record = logging.LogRecord("quotaql", logging.INFO, "", 0, "blocked", (), None)
        >>> record.quotaql_event = "blocked"
        >>> line = JsonFormatter().format(record)
        >>> line.startswith('{"time": "') and line.endswith('"quotaql_event": "blocked"}')
        True
    """

    def format(self, record: logging.LogRecord) -> str:
        """``record`` as one line of JSON."""
        created = datetime.fromtimestamp(record.created, UTC)
        entry: dict[str, Any] = {
            "time": created.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(
            (key, value)
            for key, value in record.__dict__.items()
            if key not in _RECORD_ATTRIBUTES and key not in _SKIPPED and key[:1] != "_"
        )
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=_jsonable)


def _jsonable(value: object) -> object:
    """What JSON cannot hold as it is: a collection as a list, anything else as ``str()``."""
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)


# -- a logger nobody reads ----------------------------------------------------------------


class LoggingWarning(UserWarning):
    """quotaql's log records would reach no handler: configure logging (docs/logging.md)."""


def unseen_warnings(target: logging.Logger = logger) -> str | None:
    """Why nothing would show ``target``'s WARNING records (None: something does).

    Nothing does when the level is above WARNING (inherited from the root, or
    ``logging.disable``; a level set on the logger itself is taken as meant), the logger
    is disabled (a ``dictConfig`` with ``disable_existing_loggers``), the handlers on its
    way are all above WARNING, or none is and logging was configured for other loggers
    only: Python then prints WARNINGs on stderr through its last resort, without their
    fields, and drops every INFO line. That is the case under uvicorn's default logging,
    which configures uvicorn's own loggers, not the root. A script that configured no
    logging at all is not warned: the last resort shows its WARNINGs.
    """
    if target.disabled:
        return (
            f"the {target.name!r} logger is disabled (a dictConfig with disable_existing_loggers)"
        )
    if not target.isEnabledFor(logging.WARNING):
        if target.level > logging.WARNING:
            return None  # set on the logger itself: the operator's choice
        level = logging.getLevelName(target.getEffectiveLevel())
        return f"the {target.name!r} logger's level is {level} (inherited), above WARNING"
    current: logging.Logger | None = target
    found = False  # a handler on the way, at any level: then Python's last resort is not
    while current is not None:
        for handler in current.handlers:
            if handler.level <= logging.WARNING:
                return None
            found = True
        if not current.propagate:
            break
        current = current.parent
    if found:
        return f"the handlers that receive the {target.name!r} logger's records are above WARNING"
    last = logging.lastResort
    if last is None or last.level > logging.WARNING:
        return f"no handler receives the {target.name!r} logger's records, and no last resort"
    if not _configured_elsewhere():
        return None  # nothing is configured at all (a script): the last resort shows them
    return (
        f"logging is configured (other loggers have handlers: uvicorn's?) but no handler"
        f" receives the {target.name!r} logger's records (nor the root's)"
    )


def _configured_elsewhere() -> bool:
    """Whether any logger has a handler (an application or a server configured logging)."""
    loggers = list(logging.Logger.manager.loggerDict.values())
    return any(isinstance(one, logging.Logger) and one.handlers for one in loggers)


_warned: set[str] = set()  # the loggers warned about, once each per process
_warned_lock = threading.Lock()


def warn_if_unseen(target: logging.Logger = logger) -> bool:
    """Warn (a :class:`LoggingWarning`, once per process and logger) when nothing would
    show ``target``'s WARNING records: True when it warned."""
    if target.name in _warned:
        return False
    why = unseen_warnings(target)
    if why is None:
        return False
    with _warned_lock:
        if target.name in _warned:
            return False
        _warned.add(target.name)
    warnings.warn(
        f"quotaql logs to nothing: {why}. Its INFO lines (refusals, shadow mode's 'would"
        " have blocked', reloads) are lost, and its WARNINGs reach at most Python's"
        " last-resort stderr, without their fields. Configure logging before creating the"
        " gate, e.g. uvicorn --log-config with the quotaql logger at INFO (docs/logging.md)",
        LoggingWarning,
        stacklevel=4,
    )
    return True
