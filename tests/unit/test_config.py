from __future__ import annotations

from pathlib import Path

import pytest

from proxy.cli import build_parser, config_from_args
from proxy.config import ConfigError, ProxyConfig, parse_properties


def test_properties_format_as_java_reads_it():
    text = "# comment\n! also a comment\nbootstrap.servers = a:1,b:2\nlisteners: 0.0.0.0:9000\n" \
           "proxy.broker.port.map=1:9001,\\\n  2:9002\nempty.key\n"
    assert parse_properties(text) == {
        "bootstrap.servers": "a:1,b:2",
        "listeners": "0.0.0.0:9000",
        "proxy.broker.port.map": "1:9001,2:9002",
        "empty.key": "",
    }


def test_port_mapping_is_a_pure_function_of_config():
    cfg = ProxyConfig.from_properties({"bootstrap.servers": "k:9092", "listeners": "0.0.0.0:19092",
                                       "proxy.broker.node.id.min": "1"})
    assert [cfg.port_for_node(n) for n in (1, 2, 3)] == [19093, 19094, 19095]
    assert cfg.advertised == "127.0.0.1"
    mapped = ProxyConfig.from_properties({"bootstrap.servers": "k:9092", "proxy.broker.port.map": "7:30000"})
    assert mapped.port_for_node(7) == 30000
    with pytest.raises(ConfigError, match="proxy.broker.port.base"):
        ProxyConfig.from_properties({"bootstrap.servers": "k:9092"}).port_for_node(70000)


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({}, "bootstrap.servers"),
        ({"bootstrap.servers": "nohostport"}, "HOST:PORT"),
        ({"bootstrap.servers": "k:1", "socket.request.max.bytes": "lots"}, "socket.request.max.bytes"),
        ({"bootstrap.servers": "k:1", "proxy.broker.port.map": "1=2"}, "proxy.broker.port.map"),
    ],
)
def test_bad_config_names_the_key(props, message):
    with pytest.raises(ConfigError, match=message):
        ProxyConfig.from_properties(props)


def test_cli_flags_override_file(tmp_path: Path):
    conf = tmp_path / "proxy.properties"
    conf.write_text("bootstrap.servers=file:1\nlisteners=127.0.0.1:1000\nsocket.request.max.bytes=10\n")
    args = build_parser().parse_args(["serve", "--config", str(conf), "--bootstrap-servers", "flag:2",
                                      "--set", "socket.request.max.bytes=20"])
    cfg = config_from_args(args)
    assert cfg.bootstrap_servers == [("flag", 2)]
    assert cfg.listen_port == 1000
    assert cfg.socket_request_max_bytes == 20


def test_unknown_keys_are_kept_for_later_layers():
    cfg = ProxyConfig.from_properties({"bootstrap.servers": "k:1", "remote.log.storage.system.enable": "true"})
    assert cfg.extra == {"remote.log.storage.system.enable": "true"}
