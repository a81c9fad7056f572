"""The reloader: the config file read again when it changes, applied only once it is whole."""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Any

from quotaql.config import load_config
from quotaql.cost_analysis import check_model
from quotaql.errors import ConfigError
from quotaql.gate import charges

if TYPE_CHECKING:
    from collections.abc import Callable

    from quotaql.config import Config
    from quotaql.instrumentation.logs import StructuredLog

__all__ = ["Reloader", "check_config"]


class Reloader:
    """Reads the config file again when it changes, at most once per ``interval`` seconds.

    A change is applied only once the file has stayed the same (size and modification
    time) across two polls, and only if it is valid and still declares the tiers the
    configuration in force declares: an editor's half-written file (cut before
    ``[tiers]``, every tenant on the defaults; cut before ``[tenants]``, tenants demoted)
    is never applied. Write the file by atomic rename (``mv new.toml quotaql.toml``): the
    first poll that sees the change sees the whole file, and the next one applies it.
    """

    def __init__(
        self,
        path: str,
        interval: float,
        log: StructuredLog,
        check: Callable[[Config], None] | None = None,
    ) -> None:
        self.log = log
        self.check = check  # what else a new file must pass (the gate's own arguments)
        self.path = path
        self.interval = interval
        self._seen = self._stamp()
        self._pending: tuple[int, int, int] | None = None  # changed, not yet seen twice
        self._next = time.monotonic() + interval
        self._lock = threading.Lock()

    def _stamp(self) -> tuple[int, int, int] | None:
        try:
            stat = os.stat(self.path)
        except OSError:
            return None
        return stat.st_mtime_ns, stat.st_size, stat.st_ino

    def poll(self, schema: Any, current: Config) -> Config | None:
        """A new valid config if the file changed and has stayed so since the last look."""
        if self.interval <= 0 or time.monotonic() < self._next:
            return None
        if not self._lock.acquire(blocking=False):
            return None  # another thread is looking
        try:
            self._next = time.monotonic() + self.interval
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
        self.log.log(
            logging.INFO,
            "config_reloaded",
            "quotaql: configuration reloaded from %s",
            self.path,
            file=self.path,
        )
        self.interval = config.limits.reload_interval
        return config


def check_config(config: Config, schema: Any) -> None:
    """``config`` against ``schema``: its weights' and its root-field quotas' coordinates."""
    check_model(schema, config.cost.model)
    charges.check_fields(config, schema)
