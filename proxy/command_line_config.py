"""The proxy's configuration from the command line, the Kafka way: a ``.properties`` file
(``--config``), flags that stand for keys (``--bootstrap-servers``, ``--listen``, ...), then
``--set KEY=VALUE`` overrides; keys nobody reads are reported (``proxy/config_keys.py``)."""

from __future__ import annotations

import argparse

from proxy.config import ConfigError, ProxyConfig, load_properties, resolve_references
from proxy.config_keys import check_keys


def config_from_args(args: argparse.Namespace, extra: dict[str, str] | None = None) -> ProxyConfig:
    props: dict[str, str] = {}
    if args.config:
        props.update(load_properties(args.config))
    props.update(extra or {})
    if getattr(args, "bootstrap_servers", None):
        props["bootstrap.servers"] = args.bootstrap_servers
    if getattr(args, "listen", None):
        props["listeners"] = args.listen
    if getattr(args, "remote", None):
        props["remote.log.storage.uri"] = args.remote
    if getattr(args, "metadata", None):
        props["remote.log.metadata.uri"] = args.metadata
    if getattr(args, "data_dir", None) and args.command == "serve":
        props["proxy.data.dir"] = str(args.data_dir.resolve())
    if getattr(args, "tier_all_topics", False):
        props["proxy.tier.all.topics"] = "true"
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        props[key.strip()] = value.strip()
    # Before parsing: a misspelled key's suggestion is the useful line when parsing then fails
    # for the want of the key it was meant to be.
    strict = getattr(args, "strict_config", False) or props.get("proxy.config.strict", "").strip().lower() == "true"
    check_keys(props, strict=strict)
    return ProxyConfig.from_properties(resolve_references(props))
