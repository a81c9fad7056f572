"""Numbers as clients see them (quotaql.policy.numbers): the float noise of issue 24."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from quotaql.policy.numbers import is_whole, left, points, seconds


def test_the_noise_clients_saw_is_gone() -> None:
    assert points(280.0) == 280
    assert isinstance(points(280.0), int)
    assert left(56.65995000000001) == 56
    assert left(204.20999999999998) == 204
    assert seconds(7.4780136352716955) == 7.479
    assert left(2478.9999999997) == 2479  # the refill's millisecond arithmetic, not a loss
    assert points(2.5) == 2.5
    assert points(1 / 3) == 0.333
    assert left(2.5678, whole=False) == 2.567
    assert is_whole(69.99999999999)
    assert not is_whole(69.5)


@given(st.floats(min_value=0, max_value=1e12, allow_nan=False))
def test_a_client_is_never_told_it_has_more_or_can_come_back_sooner(value: float) -> None:
    assert left(value) <= value + 1e-6
    assert left(value, whole=False) <= value + 1e-6
    assert seconds(value) >= value - 1e-6
    assert math.isfinite(seconds(value))


def test_nothing_negative_is_answered() -> None:
    assert left(-3.2) == 0
    assert seconds(-1.0) == 0.0
