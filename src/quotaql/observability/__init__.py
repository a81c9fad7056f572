"""Generators of operational artifacts: Grafana dashboards and Prometheus alert rules."""
