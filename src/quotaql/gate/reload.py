"""The reloader: the config file read again when it changes, applied only once it is whole.

Every process that holds a gate looks at the file on a timer, in a thread of its own
(``quotaql-reload``), not on requests: an idle worker, or one that serves only websockets,
applies an edit as soon as a busy one, within ``reload_interval`` and one more look (the
two looks that tell a whole file from one being written). The thread starts once the gate
knows its schema (``gate.check(schema)`` at startup, or its first operation), which a new
file is checked against; a gate never used starts none. A worker forked from a process
that held a gate (gunicorn ``--preload``) starts its own thread in the child.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any

from quotaql.config import load_config
from quotaql.cost_analysis import check_model
from quotaql.errors import ConfigError
from quotaql.gate import charges

if TYPE_CHECKING:
    from collections.abc import Callable

    from quotaql.config import Config
    from quotaql.instrumentation.logs import StructuredLog

__all__ = ["MIN_POLL_S", "Reloader", "check_config", "digest_of"]

#: The shortest wait between two looks of the reload thread (a ``reload_interval`` below it,
#: as tests set, would spin a core on ``stat``).
MIN_POLL_S = 0.01


def digest_of(path: str) -> str:
    """12 hex digits of the SHA-256 of the file at ``path`` (``""``: unreadable): what
    ``quotaql_config_info`` shows, so that Prometheus tells whether every worker runs the
    same file."""
    try:
        with open(path, "rb") as file:
            return hashlib.sha256(file.read()).hexdigest()[:12]
    except OSError:
        return ""


class Reloader:
    """Reads the config file again when it changes, at most once per ``interval`` seconds.

    A change is applied only once the file has stayed the same (size and modification
    time) across two polls, and only if it is valid and still declares the tiers the
    configuration in force declares: an editor's half-written file (cut before
    ``[tiers]``, every tenant on the defaults; cut before ``[tenants]``, tenants demoted)
    is never applied. Write the file by atomic rename (``mv new.toml quotaql.toml``): the
    first poll that sees the change sees the whole file, and the next one applies it.

    ``watch(schema)``, if given, is called at each look too: the candidate weights' file
    (:class:`~quotaql.gate.candidate.Candidate`) is looked at on the same timer, no thread
    of its own.
    """

    def __init__(
        self,
        path: str,
        interval: float,
        log: StructuredLog,
        check: Callable[[Config], None] | None = None,
        watch: Callable[[Any], None] | None = None,
    ) -> None:
        self.log = log
        self.check = check  # what else a new file must pass (the gate's own arguments)
        # Called with the schema at each look: another file read on this timer (the
        # candidate weights, quotaql.gate.candidate), which must never raise.
        self.watch = watch
        self.path = path
        self.interval = interval
        self._seen = self._stamp()
        self._pending: tuple[int, int, int] | None = None  # changed, not yet seen twice
        self._next = time.monotonic() + interval
        self._lock = threading.Lock()
        self.digest = digest_of(path)  # of the file in force
        self.generation = 1  # configurations applied, the first one included
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._tick: Callable[[], bool] | None = None

    @property
    def running(self) -> bool:
        """Whether the reload thread looks at the file (then requests need not)."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    def start(self, owner: object, tick: Callable[[Any], None]) -> None:
        """Look at the file every ``interval`` seconds in a daemon thread, calling
        ``tick(owner)``, until ``owner`` is garbage-collected or :meth:`stop` (the thread
        holds ``owner`` weakly: a forgotten gate does not live on in its thread). Once: a
        thread already running is kept."""
        if self.interval <= 0 or self.running:
            return
        owner_ref = weakref.ref(owner)
        self._tick = lambda: _call(owner_ref, tick)
        self._stop.clear()
        weakref.finalize(owner, self._stop.set)  # its owner collected: the thread ends now
        self._spawn()

    def _spawn(self) -> None:
        thread = threading.Thread(target=self._run, name="quotaql-reload", daemon=True)
        self._thread = thread
        _LIVE.add(self)
        thread.start()

    def stop(self) -> None:
        """Stop the reload thread (it ends within one wait)."""
        self._stop.set()
        self._tick = None

    def _run(self) -> None:
        while not self._stop.wait(max(self.interval, MIN_POLL_S)):
            tick = self._tick
            if tick is None or self.interval <= 0:
                return
            try:
                alive = tick()
            except Exception as error:  # never let the thread die of one bad look
                self.log.log(
                    logging.ERROR,
                    "config_reload_failed",
                    "quotaql: looking at %s failed (%s: %s); trying again",
                    self.path,
                    type(error).__name__,
                    error,
                    file=self.path,
                )
                continue
            if alive is False:
                return

    def _after_fork(self) -> None:
        """In a forked child: the parent's thread did not survive the fork."""
        if self._tick is not None and not self._stop.is_set():
            self._lock = threading.Lock()  # perhaps held by the parent's thread at the fork
            self._spawn()

    def _stamp(self) -> tuple[int, int, int] | None:
        try:
            stat = os.stat(self.path)
        except OSError:
            return None
        return stat.st_mtime_ns, stat.st_size, stat.st_ino

    def poll(self, schema: Any, current: Config, *, due: bool = False) -> Config | None:
        """A new valid config if the file changed and has stayed so since the last look
        (``due``: look now, the reload thread's timer says it is time)."""
        if self.interval <= 0 or (not due and time.monotonic() < self._next):
            return None
        if not self._lock.acquire(blocking=False):
            return None  # another thread is looking
        try:
            self._next = time.monotonic() + self.interval
            if self.watch is not None:
                self.watch(schema)
            stamp = self._stamp()
            if stamp is None or stamp == self._seen:
                self._pending = None
                return None
            if stamp != self._pending:  # changed since the last look: maybe mid-write
                self._pending = stamp
                return None
            self._seen, self._pending = stamp, None
            return self._load(schema, current)
        finally:
            self._lock.release()

    def _load(self, schema: Any, current: Config) -> Config | None:
        try:
            config = load_config(self.path)
            check_config(config, schema)
            if self.check is not None:
                self.check(config)
            if current.declares_tiers and not config.declares_tiers:
                raise ConfigError(
                    "the new file declares no [tiers] (cut short while being written?);"
                    " every tenant would fall back to the default tier",
                    file=self.path,
                )
        except ConfigError as error:
            self.log.log(
                logging.ERROR,
                "config_reload_failed",
                "quotaql: %s; keeping the previous configuration",
                error,
                file=self.path,
            )
            return None
        self.digest = digest_of(self.path)
        self.generation += 1
        self.log.log(
            logging.INFO,
            "config_reloaded",
            "quotaql: configuration reloaded from %s (generation %d, digest %s)",
            self.path,
            self.generation,
            self.digest,
            file=self.path,
            generation=self.generation,
            digest=self.digest,
        )
        self.interval = config.limits.reload_interval
        return config


def check_config(config: Config, schema: Any) -> None:
    """``config`` against ``schema``: its weights' and its root-field quotas' coordinates."""
    check_model(schema, config.cost.model)
    charges.check_fields(config, schema)


def _call(owner_ref: weakref.ref[Any], tick: Callable[[Any], None]) -> bool:
    """``tick(owner)``; False once the owner is gone (the thread then ends)."""
    owner = owner_ref()
    if owner is None:
        return False
    tick(owner)
    return True


# The reloaders with a thread, for the children of a fork (threads do not survive it).
_LIVE: weakref.WeakSet[Reloader] = weakref.WeakSet()


def _restart_in_child() -> None:
    for reloader in list(_LIVE):
        reloader._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_restart_in_child)
