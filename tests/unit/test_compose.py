"""compose/docker-compose.yml stays valid and true to the CLI: Debian's docker-compose parses and
checks it without an engine, and every tiered-proxy command line in it parses with our own
argument parser (a renamed flag breaks this test, not a user's deployment). Prometheus scrapes the
port and path the proxy serves its metrics on, and Grafana finds its datasource and dashboard
where the compose file mounts them (the dashboard's queries: tests/unit/test_dashboard.py)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from proxy.cli import build_parser

COMPOSE_DIR = Path(__file__).resolve().parents[2] / "compose"
COMPOSE = COMPOSE_DIR / "docker-compose.yml"


@pytest.mark.skipif(shutil.which("docker-compose") is None,
                    reason="docker-compose is not installed (Debian package docker-compose; .ci/run installs it)")
def test_docker_compose_accepts_the_file():
    for profile in ([], ["--profile", "backfill"]):
        done = subprocess.run(["docker-compose", "-f", str(COMPOSE), *profile, "config", "-q"],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
    services = subprocess.run(["docker-compose", "-f", str(COMPOSE), "--profile", "backfill", "config", "--services"],
                              capture_output=True, text=True, timeout=60, check=True).stdout.split()
    assert set(services) == {"kafka", "seaweedfs", "create-bucket", "proxy", "prometheus", "grafana", "backfill"}


def test_compose_commands_parse_with_the_cli():
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    for name in ("proxy", "backfill"):
        args = [a.replace("${TOPIC:-orders}", "orders") for a in services[name]["command"]]
        parsed = build_parser().parse_args(args)
        assert parsed.command == args[0]
    serve = build_parser().parse_args(services["proxy"]["command"])
    settings = dict(item.split("=", 1) for item in serve.set)
    assert settings["proxy.metrics.listen"].endswith(":9464") and serve.remote.startswith("s3://tiered/")
    assert services["kafka"]["environment"]["KAFKA_LOG_RETENTION_MS"] == "600000"  # short broker retention


def _mounts(service: dict) -> dict[str, Path]:
    """Container path -> the host path (resolved against compose/) of each bind mount."""
    out = {}
    for volume in service.get("volumes", []):
        source, target, *_ = volume.split(":")
        if source.startswith("."):
            out[target] = (COMPOSE_DIR / source).resolve()
    return out


def test_prometheus_scrapes_the_proxys_metrics_port():
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    serve = build_parser().parse_args(services["proxy"]["command"])
    metrics_port = dict(item.split("=", 1) for item in serve.set)["proxy.metrics.listen"].rsplit(":", 1)[1]
    config_path = _mounts(services["prometheus"])["/etc/prometheus/prometheus.yml"]
    config = yaml.safe_load(config_path.read_text())
    (job,) = config["scrape_configs"]
    assert job["job_name"] == "tiered-proxy" and job.get("metrics_path", "/metrics") == "/metrics"
    assert job["static_configs"][0]["targets"] == [f"proxy:{metrics_port}"]
    assert services["prometheus"]["image"].startswith("prom/prometheus:v")


def test_grafana_finds_its_datasource_and_dashboard():
    import json

    services = yaml.safe_load(COMPOSE.read_text())["services"]
    grafana = services["grafana"]
    assert grafana["image"].startswith("grafana/grafana:")
    mounts = _mounts(grafana)
    provisioning = mounts["/etc/grafana/provisioning"]
    (datasource,) = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())["datasources"]
    prometheus_port = services["prometheus"]["ports"][0].split(":")[-1]
    assert datasource["url"] == f"http://prometheus:{prometheus_port}" and datasource["type"] == "prometheus"
    (provider,) = yaml.safe_load((provisioning / "dashboards" / "tiered-proxy.yml").read_text())["providers"]
    dashboards = mounts[provider["options"]["path"]]
    dashboard = json.loads((dashboards / "tiered-proxy.json").read_text())
    assert {p["datasource"]["uid"] for p in dashboard["panels"] if "targets" in p} == {datasource["uid"]}
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{provider['options']['path']}/tiered-proxy.json"
