from __future__ import annotations

import ast
import logging
import re
from pathlib import Path

import pytest

from proxy.cli import _sole_leaf, build_parser, config_from_args
from proxy.config import ConfigError, ProxyConfig, parse_properties
from proxy.config_keys import KNOWN_KEYS, check_keys, closest_key, describe_unknown
from tiering import client_security
from tiering.config import TieringConfig

ROOT = Path(__file__).resolve().parents[2]


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


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"listeners": "127.0.0.1:70000"}, r"listeners: port 70000 is out of range 0-65535 \(127.0.0.1:70000\)"),
        ({"listeners": "127.0.0.1:-1"}, r"listeners: port -1 is out of range 0-65535 \(127.0.0.1:-1\)"),
        ({"listeners": "SSL://127.0.0.1:65536"}, "listeners: port 65536 is out of range"),
        ({"proxy.metrics.listen": "0.0.0.0:123456"}, "proxy.metrics.listen: port 123456 is out of range"),
        ({"proxy.broker.port.base": "70000"}, "proxy.broker.port.base: port 70000 is out of range 1-65535"),
        ({"proxy.broker.port.base": "0"}, "proxy.broker.port.base: port 0 is out of range 1-65535"),
        ({"proxy.broker.port.base": "many"}, "proxy.broker.port.base: expected a port number"),
        ({"proxy.broker.port.base": "-1"}, "proxy.broker.port.base: port -1 is out of range 1-65535"),
        ({"proxy.broker.port.map": "1:9001,2:65536"}, "proxy.broker.port.map: port 65536 is out of range"),
        ({"bootstrap.servers": "k:0"}, "bootstrap.servers: port 0 is out of range 1-65535"),
        ({"proxy.config.strict": "yes"}, "proxy.config.strict: expected true or false"),
    ],
)
def test_ports_out_of_range_are_config_errors_naming_the_key(props: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ProxyConfig.from_properties({"bootstrap.servers": "k:1", **props})


def test_node_port_out_of_range_names_the_keys() -> None:
    cfg = ProxyConfig.from_properties({"bootstrap.servers": "k:1", "listeners": "127.0.0.1:65535"})
    with pytest.raises(ConfigError, match="broker node 1 maps to port 65537, out of range 1-65535; "
                                          "set proxy.broker.port.base"):
        cfg.port_for_node(1)


# --- the key registry ---------------------------------------------------------------------------

# Functions whose first argument is a key read from the properties (proxy/config.py's helpers).
_TAKERS = {"take", "take_int", "take_bool", "take_port"}
# Helpers called as helper(props, KEY, ...) (tiering/config.py, proxy/filters/tiered_reads.py, tiering/storage/uri.py).
_HELPERS = {"_int", "_bool", "_int_config"}
# The names the properties go by where they are read; other mappings (topic configs, Spark
# options) hold other things.
_PROPS = {"props", "config"}


def _string_constants(tree: ast.Module) -> dict[str, str]:
    return {t.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
            for t in node.targets if isinstance(t, ast.Name)}


def _keys_read(path: Path, constants: dict[str, str]) -> set[str]:
    """The config keys a source file reads from the properties: props.get(KEY), props[KEY],
    take*(KEY), _int(props, KEY) and the like, with KEY a literal or a module constant (of any
    scanned module: key constants are imported from where they are defined)."""
    tree = ast.parse(path.read_text())

    def value(node: ast.expr) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        return constants.get(node.id) if isinstance(node, ast.Name) else None

    keys: set[str | None] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr == "get" and isinstance(func.value, ast.Name) \
                    and func.value.id in _PROPS:
                keys.add(value(node.args[0]))
            elif isinstance(func, ast.Name) and func.id in _TAKERS:
                keys.add(value(node.args[0]))
            elif isinstance(func, ast.Name) and func.id in _HELPERS and len(node.args) > 1 \
                    and isinstance(node.args[0], ast.Name) and node.args[0].id in _PROPS:
                keys.add(value(node.args[1]))
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) \
                and isinstance(node.value, ast.Name) and node.value.id in _PROPS:
            keys.add(value(node.slice))
    return {k for k in keys if k is not None and re.fullmatch(r"[a-z][a-z0-9]*(\.[a-z0-9]+)*", k)}


def _sources() -> list[Path]:
    return [p for d in ("proxy", "tiering") for p in sorted((ROOT / d).rglob("*.py")) if p.name != "config_keys.py"]


def test_registry_holds_every_key_the_code_reads() -> None:
    constants = {name: text for path in _sources() for name, text in _string_constants(ast.parse(path.read_text())).items()}
    read = {key: path.relative_to(ROOT) for path in _sources() for key in _keys_read(path, constants)}
    read.update(dict.fromkeys(TieringConfig.KEYS.values(), "tiering/config.py"))  # read through KEYS[name]
    # read as prefix + name (the same names serve --command-config and Spark's kafka. options)
    read.update(dict.fromkeys((client_security.UPSTREAM_PREFIX + k for k in client_security.KEYS),
                              "tiering/client_security.py"))
    assert len(read) >= 66, "the scan found too few keys: has the way keys are read changed?"
    missing = {key: str(path) for key, path in read.items() if key not in KNOWN_KEYS}
    assert not missing, f"add these keys to proxy/config_keys.py: {missing}"


def test_registry_holds_no_key_nothing_reads() -> None:
    text = "\n".join(p.read_text() for p in _sources())
    prefixed = {client_security.UPSTREAM_PREFIX + k for k in client_security.KEYS}
    stale = sorted(k for k in KNOWN_KEYS - prefixed if f'"{k}"' not in text)
    assert not stale, f"keys listed in proxy/config_keys.py that no source names: {stale}"


def test_registry_has_no_prefixes() -> None:
    # Listed key by key: nothing passes arbitrary remote.log.storage.s3.* or ssl.* keys through.
    assert all(not k.endswith(".") and "*" not in k for k in KNOWN_KEYS)
    assert {"remote.log.storage.s3.region", "ssl.keystore.location", "upstream.ssl.key.password",
            "proxy.config.strict", "log.retention.ms", "remote.log.reader.threads"} <= KNOWN_KEYS


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("remote.log.storage.urii", "remote.log.storage.uri"),
        ("remote.log.storage.ur", "remote.log.storage.uri"),
        ("bootstrap.server", "bootstrap.servers"),
        ("listener", "listeners"),
        ("remote.log.storage.s3.regoin", "remote.log.storage.s3.region"),
        ("proxy.data.directory", "proxy.data.dir"),
        ("socket.request.max.byte", "socket.request.max.bytes"),
        ("completely.unrelated.thing", None),
    ],
)
def test_closest_key(typed: str, meant: str | None) -> None:
    assert closest_key(typed) == meant


def test_unknown_key_is_one_warning_line_with_the_suggestion(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        unknown = check_keys({"bootstrap.servers": "k:1", "remote.log.storage.urii": "x", "zzz.qqq": "1"},
                             strict=False)
    assert unknown == ["remote.log.storage.urii", "zzz.qqq"]
    assert [r.getMessage() for r in caplog.records] == [
        "unknown config key 'remote.log.storage.urii' (ignored); did you mean 'remote.log.storage.uri'?",
        "unknown config key 'zzz.qqq' (ignored)",
    ]


def test_strict_refuses_unknown_keys_in_one_line() -> None:
    with pytest.raises(ConfigError) as raised:
        check_keys({"bootstrap.servers": "k:1", "remote.log.storage.urii": "x", "zzz.qqq": "1"}, strict=True)
    assert str(raised.value) == ("unknown config key 'remote.log.storage.urii'; did you mean 'remote.log.storage.uri'?; "
                                 "unknown config key 'zzz.qqq' (refused by --strict-config / proxy.config.strict)")
    assert "\n" not in str(raised.value)
    assert describe_unknown("listener") == "unknown config key 'listener'; did you mean 'listeners'?"


def test_cli_checks_keys_from_file_and_set(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    conf = tmp_path / "proxy.properties"
    conf.write_text("bootstrap.servers=k:1\nlog.retention.msec=1000\n")
    args = build_parser().parse_args(["serve", "--config", str(conf), "--set", "remote.log.storage.urii=x"])
    with caplog.at_level(logging.WARNING):
        cfg = config_from_args(args)
    assert cfg.bootstrap_servers == [("k", 1)]
    assert [r.getMessage() for r in caplog.records] == [
        "unknown config key 'log.retention.msec' (ignored); did you mean 'log.retention.ms'?",
        "unknown config key 'remote.log.storage.urii' (ignored); did you mean 'remote.log.storage.uri'?",
    ]
    strict = build_parser().parse_args(["serve", "--config", str(conf), "--strict-config"])
    with pytest.raises(ConfigError, match="log.retention.msec"):
        config_from_args(strict)
    by_key = build_parser().parse_args(["serve", "--config", str(conf), "--set", "proxy.config.strict=true"])
    with pytest.raises(ConfigError, match="log.retention.msec"):
        config_from_args(by_key)
    known = build_parser().parse_args(["serve", "--bootstrap-servers", "k:1", "--strict-config",
                                       "--set", "remote.log.reader.threads=4"])
    assert config_from_args(known).extra == {"remote.log.reader.threads": "4"}  # known keys pass strictness


def test_sole_leaf_unwraps_nested_groups() -> None:
    error = OSError("cannot listen")
    assert _sole_leaf(ExceptionGroup("outer", [ExceptionGroup("inner", [error])])) is error
    assert _sole_leaf(ExceptionGroup("two", [error, ValueError("x")])) is None


def test_env_and_file_references_resolve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from proxy.config import resolve_references

    secrets = tmp_path / "secrets.properties"
    secrets.write_text("password=from-file\n")
    monkeypatch.setenv("PROXY_PW", "from-env")
    props = {"upstream.sasl.password": "${env:PROXY_PW}",
             "upstream.sasl.jaas.config": f'M required username="u" password="${{file:{secrets}:password}}";',
             "plain": "no $ref {here}"}
    assert resolve_references(props) == {"upstream.sasl.password": "from-env",
                                         "upstream.sasl.jaas.config": 'M required username="u" password="from-file";',
                                         "plain": "no $ref {here}"}


@pytest.mark.parametrize(("value", "message"), [
    ("${env:NO_SUCH_VAR_HERE}", r"^upstream.sasl.password: environment variable NO_SUCH_VAR_HERE \(from \$\{env:NO_SUCH_VAR_HERE\}\) is not set$"),
    ("${file:nokey}", r"^upstream.sasl.password: write \$\{file:PATH:KEY\}"),
    ("${file:/no/such/file.properties:pw}", r"^cannot read config file /no/such/file.properties"),
])
def test_unresolvable_references_name_the_key(value: str, message: str) -> None:
    from proxy.config import resolve_references

    with pytest.raises(ConfigError, match=message):
        resolve_references({"upstream.sasl.password": value})


def test_cli_resolves_references_before_parsing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BOOT", "127.0.0.1:9092")
    config = tmp_path / "proxy.properties"
    config.write_text("bootstrap.servers=${env:BOOT}\n")
    args = build_parser().parse_args(["serve", "--config", str(config)])
    assert config_from_args(args).bootstrap == "127.0.0.1:9092"
