"""The ``[redis]`` table: what the Redis storages accept of their server."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from quotaql.config import default_config, load_config
from quotaql.errors import ConfigError

if TYPE_CHECKING:
    from pathlib import Path


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "quotaql.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_eviction_is_refused_unless_the_file_allows_it(tmp_path: Path) -> None:
    assert default_config().redis.allow_eviction is False
    assert load_config(write(tmp_path, "[redis]\n")).redis.allow_eviction is False
    allowed = load_config(write(tmp_path, "[redis]\nallow_eviction = true\n"))
    assert allowed.redis.allow_eviction is True


@pytest.mark.parametrize(
    ("text", "key", "line", "reason"),
    [
        (
            '[limits]\nmode = "enforce"\n[redis]\nallow_eviction = "yes"\n',
            "redis.allow_eviction",
            4,
            'expected true or false, got a string ("yes")',
        ),
        (
            "[redis]\nallow_evictions = true\n",
            "redis.allow_evictions",
            2,
            "unknown key; did you mean 'allow_eviction'?",
        ),
        (
            "[redis]\nurl = 1\n",
            "redis.url",
            2,
            "unknown key; expected one of: 'allow_eviction'",
        ),
    ],
)
def test_a_bad_redis_key_names_the_file_line_and_key(
    tmp_path: Path, text: str, key: str, line: int, reason: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert (error.value.file, error.value.key, error.value.line) == (str(path), key, line)
    assert error.value.reason == reason
