"""``python -m quotaql.cli``: the ``quotaql`` command."""

from quotaql.cli import main

main()
