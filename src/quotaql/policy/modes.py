"""The modes a configuration chooses: what a limit does, what a failing storage means."""

from __future__ import annotations

import enum
from typing import Literal

__all__ = ["BackendErrorMode", "Mode"]


class Mode(enum.StrEnum):
    """What a limit does with a request over its quota.

    The ``mode`` of ``[limits]``, of a tier and of ``[adaptive]`` are all one of these. A
    member is its TOML string (``Mode.SHADOW == "shadow"``).

    Attributes:
        ENFORCE: refuse it (adaptive limits: debit the adaptive tiers ``cost / m``).
        SHADOW: let it through and only report it (adaptive limits: compute and export the
            multiplier, apply nothing).
        OFF: check nothing (adaptive limits: measure nothing).
    """

    ENFORCE = "enforce"
    SHADOW = "shadow"
    OFF = "off"


#: What to do when the storage fails: let requests through (``open``), refuse them
#: (``closed``) or count in process memory (``local``).
BackendErrorMode = Literal["open", "closed", "local"]
