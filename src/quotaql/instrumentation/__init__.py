"""Metrics, traces and logs of every decision; names in :mod:`quotaql.instrumentation.names`."""
