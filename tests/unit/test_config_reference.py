"""docs/configuration.md is what ``python -m proxy.config_reference`` prints, and every key in
proxy/config_keys.py has a default and a description to print."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import fields
from pathlib import Path

from proxy.config import ProxyConfig
from proxy.config_keys import AT_REST, GROUPS, KNOWN_KEYS, PROXY, TIERING
from proxy.config_reference import COMMAND, reference
from tiering.config import TieringConfig

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "configuration.md"


def test_reference_is_generated_from_the_key_registry() -> None:
    assert REFERENCE.read_text() == reference(), (
        f"docs/configuration.md is not what proxy/config_keys.py describes; regenerate it: {COMMAND}")


def test_generator_runs_as_a_module() -> None:
    printed = subprocess.run([sys.executable, "-m", "proxy.config_reference"], cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout
    assert printed == reference()


def test_every_key_is_described_once() -> None:
    keys = [key for group in GROUPS for key in group.keys]
    assert {key.name for key in keys} == KNOWN_KEYS
    assert len(keys) == len(KNOWN_KEYS), "a key is listed in two groups"
    undescribed = [key.name for key in keys if not key.description.strip() or not key.default.strip()]
    assert not undescribed, f"give these keys a default and a description in proxy/config_keys.py: {undescribed}"
    assert all(group.title and group.keys for group in GROUPS)


def test_every_key_is_in_the_reference() -> None:
    text = REFERENCE.read_text()
    assert all(f"| `{name}` |" in text for name in KNOWN_KEYS)


def test_tiering_defaults_are_the_code_defaults() -> None:
    documented = {key.name: key.default for group in (TIERING, AT_REST) for key in group.keys}
    for field in fields(TieringConfig):
        name = TieringConfig.KEYS[field.name]
        value = str(field.default).lower() if isinstance(field.default, bool) else str(field.default)
        assert documented[name].startswith(f"`{value}`"), f"{name}: the code's default is {value}"


def test_proxy_defaults_are_the_code_defaults() -> None:
    config = ProxyConfig.from_properties({"bootstrap.servers": "k:1"})
    documented = {key.name: key.default for key in PROXY.keys}
    attributes = {"listeners": f"{config.listen_host}:{config.listen_port}",
                  "proxy.broker.node.id.min": config.broker_node_id_min,
                  "socket.request.max.bytes": config.socket_request_max_bytes,
                  "proxy.upstream.response.max.bytes": config.upstream_response_max_bytes,
                  "proxy.max.in.flight.requests": config.max_in_flight_requests,
                  "proxy.response.buffer.max.bytes": config.response_buffer_max_bytes,
                  "proxy.metadata.refresh.ms": config.metadata_refresh_ms,
                  "proxy.upstream.connect.timeout.ms": config.upstream_connect_timeout_ms,
                  "proxy.workers": config.workers,
                  "proxy.request.validation": str(config.validate_requests).lower()}
    for name, value in attributes.items():
        assert documented[name].startswith(f"`{value}`"), f"{name}: the code's default is {value}"


def test_key_tables_in_the_docs_give_the_reference_defaults() -> None:
    """The short tables of keys on the task pages (first cell a key, second its default) stay true."""
    defaults = {key.name: key.default for group in GROUPS for key in group.keys}
    pages = [ROOT / "README.md", *(p for p in sorted((ROOT / "docs").glob("*.md")) if p != REFERENCE)]
    checked, wrong = 0, []
    for page in pages:
        for line in page.read_text().splitlines():
            cells = line.split(" | ")
            name = cells[0].removeprefix("| `").split("`")[0]
            if line.startswith("| `") and name in defaults:
                checked += 1
                if cells[1] != defaults[name]:
                    wrong.append(f"{page.name}: {name} | {cells[1]} (proxy/config_keys.py: {defaults[name]})")
    assert checked >= 10, "no key tables found: has their layout changed?"
    assert not wrong, "defaults that differ from proxy/config_keys.py:\n" + "\n".join(wrong)
