"""The extension's fixtures (config files, the shop's resolver log) for these tests too."""

from tests.plugin.conftest import _clear_resolver_calls, write_config

__all__ = ["_clear_resolver_calls", "write_config"]
