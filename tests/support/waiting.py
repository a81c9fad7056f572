"""Waiting for what a server or a thread does in its own time, bounded."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["eventually"]


def eventually(check: Callable[[], bool], timeout: float, every: float = 0.01) -> float | None:
    """Seconds until ``check()`` held (looked at every ``every`` seconds), or None if it
    did not within ``timeout``."""
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        if check():
            return time.monotonic() - began
        time.sleep(every)
    return None
