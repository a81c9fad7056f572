"""How the report writes numbers and scraped text."""

from __future__ import annotations

import math
import re
from typing import Final


def edge_text(value: float) -> str:
    return "+Inf" if value == math.inf else f"{value:g}"


def percent(q: float) -> str:
    return f"{q * 100:g}"


def size_text(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.6g}"


def count_text(value: float) -> str:
    return f"{round(value):,}"


def count_range(low: float, high: float) -> str:
    low_text, high_text = count_text(low), count_text(high)
    return low_text if low_text == high_text else f"between {low_text} and {high_text}"


_UNPRINTABLE: Final = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` with control characters escaped: label values are whatever was scraped."""
    return _UNPRINTABLE.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
