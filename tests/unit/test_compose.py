"""compose/docker-compose.yml stays valid and true to the CLI: Debian's docker-compose parses and
checks it without an engine, and every tiered-proxy command line in it parses with our own
argument parser (a renamed flag breaks this test, not a user's deployment)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from proxy.cli import build_parser

COMPOSE = Path(__file__).resolve().parents[2] / "compose" / "docker-compose.yml"


@pytest.mark.skipif(shutil.which("docker-compose") is None,
                    reason="docker-compose is not installed (Debian package docker-compose; .ci/run installs it)")
def test_docker_compose_accepts_the_file():
    for profile in ([], ["--profile", "backfill"]):
        done = subprocess.run(["docker-compose", "-f", str(COMPOSE), *profile, "config", "-q"],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
    services = subprocess.run(["docker-compose", "-f", str(COMPOSE), "--profile", "backfill", "config", "--services"],
                              capture_output=True, text=True, timeout=60, check=True).stdout.split()
    assert set(services) == {"kafka", "seaweedfs", "create-bucket", "proxy", "backfill"}


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
