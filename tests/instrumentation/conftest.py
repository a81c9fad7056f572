"""The extension's fixtures (config files, the shop's resolver log) for these tests too."""

from tests.adapters.strawberry.conftest import _clear_resolver_calls, write_config

__all__ = ["_clear_resolver_calls", "write_config"]
