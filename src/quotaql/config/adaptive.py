"""The ``[adaptive]`` table of ``quotaql.toml``: which tiers adaptive limits scale, and how."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal, cast, get_args

from quotaql.errors import ConfigError
from quotaql.policy.modes import Mode

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "ADAPTIVE_MODES",
    "ORDERED",
    "PRESSURE_SOURCES",
    "AdaptiveConfig",
    "AdaptiveMode",
    "PressureSource",
    "describe_range",
    "ordering_error",
    "range_of",
]

#: ``off``: nothing measured; ``shadow``: pressure and ``m`` computed, exported and logged,
#: nothing applied; ``enforce``: adaptive tiers are debited ``cost / m``. The one
#: :class:`~quotaql.policy.modes.Mode` of every mode.
AdaptiveMode = Mode
#: Where pressure comes from (the ``source`` label of ``quotaql_pressure``).
PressureSource = Literal["latency", "errors", "callable"]

#: The modes in the order an error lists them.
ADAPTIVE_MODES: Final = (Mode.OFF, Mode.SHADOW, Mode.ENFORCE)
PRESSURE_SOURCES: Final = cast("tuple[PressureSource, ...]", get_args(PressureSource))


@dataclass(frozen=True, slots=True)
class AdaptiveConfig:
    """The ``[adaptive]`` table of ``quotaql.toml``.

    Attributes:
        mode: ``off`` (default), ``shadow`` or ``enforce`` (see :data:`AdaptiveMode`).
        sources: where pressure comes from; pressure is the largest of them.
        tiers: the tiers whose quotas are scaled; None: every tier that is not
            ``essential``. An essential tier may not be listed.
        floor: the smallest multiplier (above 0, at most 1): a tier keeps at least this
            share of its refill rate however high the pressure.
        latency_target: seconds; the latency percentile at or below it is no pressure.
        latency_saturate: seconds; at or above it, full pressure (above the target).
        latency_percentile: which percentile of the execution times (above 0, below 1).
        error_target: the share of unexpected errors that is no pressure (0 to 1).
        error_saturate: the share that is full pressure (above the target, at most 1).
        window: seconds of samples the measured sources look at (at least 1).
        min_samples: below this many samples in the window, the measured sources report
            no pressure (too little traffic to tell).
        max_tenant_share: the most weight one tenant's samples may have in the window
            (above 0, at most 1). Keep it below ``1 - latency_percentile`` and below the
            error share that reaches ``engage_at``, or one tenant alone can engage.
        min_subjects: the fewest subjects (addresses counted by their /24 or /48 network)
            whose operations must show the pressure for it to count for everyone: the
            pressure that engages is the window's without its ``min_subjects - 1`` subjects
            that contribute most (1: every sample counts as it is).
        min_cost_share: the share of what the window's operations were charged that the
            operations showing the pressure (failed ones; ones slower than
            ``latency_target``) must hold for it to count for everyone (0: no such check):
            cheap failing queries among costly good ones engage nothing. Keep it at or below
            the error share that reaches ``engage_at``.
        engage_at: pressure at or above it, for ``engage_for`` seconds, engages.
        release_at: pressure at or below it, for ``release_for`` seconds, releases (below
            ``engage_at``: the hysteresis).
        engage_for: seconds.
        release_for: seconds.
        step: the most ``m`` moves per second (above 0, at most 1).
        scale_global: the ``[global]`` quota is scaled too, for the operations of adaptive
            tiers (TOML key ``global``); by default the platform quota is left alone.
    """

    mode: AdaptiveMode = Mode.OFF
    sources: tuple[PressureSource, ...] = ("latency",)
    tiers: tuple[str, ...] | None = None
    floor: float = 0.25
    latency_target: float = 0.25
    latency_saturate: float = 1.0
    latency_percentile: float = 0.9
    error_target: float = 0.01
    error_saturate: float = 0.1
    window: float = 10.0
    min_samples: int = 50
    max_tenant_share: float = 0.05
    min_subjects: int = 5
    min_cost_share: float = 0.05
    engage_at: float = 0.5
    release_at: float = 0.2
    engage_for: float = 5.0
    release_for: float = 30.0
    step: float = 0.1
    scale_global: bool = False

    def __post_init__(self) -> None:
        if self.mode not in ADAPTIVE_MODES:
            raise ConfigError(f"mode must be one of {', '.join(ADAPTIVE_MODES)}, got {self.mode!r}")
        object.__setattr__(self, "mode", Mode(self.mode))
        sources: object = self.sources
        if isinstance(sources, str) or not isinstance(sources, tuple | list):
            raise ConfigError(f"sources must be a list of source names, got {sources!r}")
        object.__setattr__(self, "sources", tuple(sources))
        for source in self.sources:
            if source not in PRESSURE_SOURCES:
                raise ConfigError(
                    f"sources: unknown source {source!r} (expected {', '.join(PRESSURE_SOURCES)})"
                )
        if not self.sources:
            raise ConfigError("sources must name at least one source")
        if len(set(self.sources)) < len(self.sources):
            raise ConfigError(f"sources names a source twice: {list(self.sources)}")
        tiers: object = self.tiers
        if tiers is not None:
            if isinstance(tiers, str) or not isinstance(tiers, tuple | list):
                raise ConfigError(f"tiers must be a list of tier names, got {tiers!r}")
            object.__setattr__(self, "tiers", tuple(tiers))
            if not tiers:
                raise ConfigError("tiers must name at least one tier (or be left out)")
            if not all(isinstance(name, str) and name for name in tiers):
                raise ConfigError(f"tiers must be tier names, got {list(tiers)!r}")
            if len(set(tiers)) < len(tiers):
                raise ConfigError(f"tiers names a tier twice: {list(tiers)}")
        for name, bounds in _RANGES.items():
            value = getattr(self, name)
            if not _within(value, bounds):
                raise ConfigError(f"{name} must be {describe_range(bounds)}, got {value!r}")
        for name in ("min_samples", "min_subjects"):
            size = getattr(self, name)
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {size!r}")
        if not isinstance(self.scale_global, bool):
            raise ConfigError(f"global must be true or false, got {self.scale_global!r}")
        for low, high in _ORDERED:
            if getattr(self, high) <= getattr(self, low):
                raise ConfigError(ordering_error(low, high, getattr(self, low)))

    @property
    def enabled(self) -> bool:
        """Anything to measure (``shadow`` or ``enforce``)."""
        return self.mode is not Mode.OFF

    @property
    def measures(self) -> bool:
        """A source that needs the operations' samples (``latency``, ``errors``)."""
        return "latency" in self.sources or "errors" in self.sources


# Each number's range: (low, high, low included, high included).
_Bounds = tuple[float, float, bool, bool]
_RANGES: Final[Mapping[str, _Bounds]] = {
    "floor": (0.0, 1.0, False, True),
    "latency_target": (0.0, math.inf, False, False),
    "latency_saturate": (0.0, math.inf, False, False),
    "latency_percentile": (0.0, 1.0, False, False),
    "error_target": (0.0, 1.0, True, False),
    "error_saturate": (0.0, 1.0, False, True),
    "window": (1.0, math.inf, True, False),
    "max_tenant_share": (0.0, 1.0, False, True),
    "min_cost_share": (0.0, 1.0, True, True),
    "engage_at": (0.0, 1.0, False, True),
    "release_at": (0.0, 1.0, True, False),
    "engage_for": (0.0, math.inf, True, False),
    "release_for": (0.0, math.inf, True, False),
    "step": (0.0, 1.0, False, True),
}
# (a, b): b must be above a.
_ORDERED: Final = (
    ("latency_target", "latency_saturate"),
    ("error_target", "error_saturate"),
    ("release_at", "engage_at"),
)


def _within(value: object, bounds: _Bounds) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        return False
    low, high, low_in, high_in = bounds
    if math.isinf(value):
        return False
    above = value >= low if low_in else value > low
    below = value <= high if high_in else value < high
    return above and below


def describe_range(bounds: _Bounds) -> str:
    """``bounds`` in words: ``a number above 0 and at most 1``."""
    low, high, low_in, high_in = bounds
    first = f"{'at least' if low_in else 'above'} {low:g}"
    if high == math.inf:
        return f"a finite number {first}"
    return f"a number {first} and {'at most' if high_in else 'below'} {high:g}"


def range_of(name: str) -> _Bounds | None:
    """The range of the ``[adaptive]`` number ``name`` (for the config reader)."""
    return _RANGES.get(name)


def ordering_error(low: str, high: str, low_value: float) -> str:
    """The message when ``high`` is not above ``low`` (for the config reader too)."""
    return f"{high} must be above {low} ({low_value:g})"


ORDERED: Final = _ORDERED
