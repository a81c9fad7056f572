"""examples/stack: the local stack starts, takes load and reaches Prometheus; compose is sound."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from tests.support.servers import free_port

STACK = Path(__file__).resolve().parents[2] / "examples" / "stack"


def test_stack_check_starts_loads_and_stops() -> None:
    ports = [free_port() for _ in range(3)]  # never the machine's 6379
    done = subprocess.run(
        [sys.executable, str(STACK / "stack.py"), "--check", "--port", str(ports[0]),
         "--redis-port", str(ports[1]), "--prometheus-port", str(ports[2])],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "prometheus has quotaql_requests_total" in done.stdout
    assert "stack check: OK" in done.stdout


def test_compose_file_mounts_files_that_exist() -> None:
    compose = yaml.safe_load((STACK / "docker-compose.yml").read_text(encoding="utf-8"))
    services = compose["services"]
    assert set(services) == {"redis", "shop", "prometheus", "grafana"}
    for service in services.values():
        for volume in service.get("volumes", []):
            host = volume.split(":", 1)[0]
            assert (STACK / host).resolve().exists(), volume
    grafana = " ".join(services["grafana"]["volumes"])
    assert "/etc/grafana/provisioning/dashboards/" in grafana
    assert "/etc/grafana/provisioning/datasources/" in grafana
    provider = yaml.safe_load((STACK / "../../dashboards/provisioning/dashboards.yml").read_text())
    assert provider["providers"][0]["options"]["path"] in grafana
    prometheus = yaml.safe_load((STACK / "prometheus.docker.yml").read_text(encoding="utf-8"))
    assert prometheus["rule_files"] == ["/etc/prometheus/rules/quotaql.rules.yml"]
    assert "/etc/prometheus/rules/quotaql.rules.yml" in " ".join(services["prometheus"]["volumes"])
    # Where the compose plugin exists, Docker itself validates the file.
    docker = shutil.which("docker")
    if (
        docker
        and subprocess.run(
            [docker, "compose", "version"], capture_output=True, check=False
        ).returncode
        == 0
    ):
        checked = subprocess.run(
            [docker, "compose", "-f", str(STACK / "docker-compose.yml"), "config", "-q"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert checked.returncode == 0, checked.stderr
