"""``tiered-proxy describe``: each partition's two tiers, asked of a running proxy over the Kafka
protocol, as any client could: ListOffsets EARLIEST (-2, ``Rx`` once anything is tiered),
EARLIEST_LOCAL (-4, ``Lx``), LATEST_TIERED (-5, ``Ry``) and LATEST (-1, ``Lz``); DescribeLogDirs
for the remote tier's log dir (remote bytes, tiering lag, and in tagged fields the segment count,
the offsets the brokers deleted before they were tiered, the offsets cut back from the remote tier
because the cluster's log replaced them, and the KIP-950 state).

``describe --cost``: each tiered topic's last hour of remote-tier cost, as the proxy prices it
(``tiering.cost``; a tagged field per topic of the same log dir): the requests and bytes it sent
for the topic in the last hour, one hour of the topic's storage, and a month projected as that
hour x 730. Prices given to describe (``--config``, ``--set``) price the proxy's counts instead.
With ``--metadata`` it also works when no proxy answers: from the metadata store alone, storage
only (request counts live in a running proxy)."""

from __future__ import annotations

import argparse
import re
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from protocol.apis import DESCRIBE_LOG_DIRS, LIST_OFFSETS, METADATA
from protocol.errors import ErrorCode
from protocol.remote_log_dir import (
    DATA_LOSS,
    DIVERGENCE,
    REMOTE_LOG_DIR_PREFIX,
    SEGMENT_COUNT,
    STORED_BYTES,
    TAG_DATA_LOSS,
    TAG_DIVERGENCE,
    TAG_SEGMENT_COUNT,
    TAG_STORED_BYTES,
    TAG_TIERED_BY,
    TAG_TIERING_STATE,
)
from proxy.config import ConfigError, load_properties, resolve_references
from tiering.broker_client import AuthenticationRequiredError, BrokerClient, BrokerClientError
from tiering.client_security import ClientSecurity
from tiering.cost import (
    HOURS_PER_MONTH,
    PRICE_CURRENCY_CONFIG,
    TAG_TOPIC_COST,
    Prices,
    TopicCost,
    decode_topic_cost,
    money,
    topic_cost,
    window_text,
)

LIST_OFFSETS_VERSION = 9  # the first with LATEST_TIERED; the proxy offers it whatever the broker
METADATA_VERSION = 12  # the newest BrokerClient speaks
EARLIEST, LATEST, EARLIEST_LOCAL, LATEST_TIERED = -2, -1, -4, -5
_TIMESTAMP_NAMES = {EARLIEST: "EARLIEST", LATEST: "LATEST", EARLIEST_LOCAL: "EARLIEST_LOCAL",
                    LATEST_TIERED: "LATEST_TIERED"}


class DescribeError(Exception):
    """describe cannot show a true picture: nothing answers, a broker answers instead of the
    proxy, the topic does not exist, or an answer carries an error code. One line, for the
    operator."""


class NoProxyError(DescribeError):
    """No tiered-proxy answers at the address: nothing does, or a broker does."""


@dataclass
class PartitionRow:
    topic: str
    partition: int
    rx: int | None  # None: nothing tiered
    ry: int | None
    lx: int
    lz: int
    segments: int
    remote_bytes: int
    lag: int
    state: str
    lost: int = 0  # offsets the brokers deleted before they were tiered
    diverged: int = 0  # offsets cut back from the remote tier because the cluster's log replaced them
    tiered_by: str = "-"  # who tiers the topic: brokers, proxy, none ("-": a proxy that does not say)
    stored_bytes: int = -1  # what the segments take in the remote tier (-1: a proxy that does not say)


def describe(bootstrap: str, topic: str | None = None, security: ClientSecurity | None = None) -> list[PartitionRow]:
    client = BrokerClient(bootstrap, security=security)
    try:
        try:
            client.metadata([])  # learns the brokers; the first thing that can find nobody there
        except BrokerClientError as e:
            raise _unreachable(bootstrap, e) from None
        if not client.brokers:
            raise DescribeError(f"{bootstrap} answered Metadata with no brokers")
        node = min(client.brokers)
        remote = _remote_log_dir(client, node, bootstrap)
        rows = []
        for name, partitions in sorted(_topics(client, node, topic).items()):
            by_leader: dict[int, list[int]] = {}
            for p, leader in partitions.items():
                by_leader.setdefault(leader, []).append(p)
            offsets: dict[tuple[int, int], int] = {}
            for leader, numbers in sorted(by_leader.items()):
                for timestamp in (EARLIEST, LATEST, EARLIEST_LOCAL, LATEST_TIERED):
                    body = {"replica_id": -1, "isolation_level": 0, "timeout_ms": 10_000, "topics": [
                        {"name": name, "partitions": [{"partition_index": p, "current_leader_epoch": -1,
                                                       "timestamp": timestamp} for p in numbers]}]}
                    answer = client.request(leader, LIST_OFFSETS, LIST_OFFSETS_VERSION, body)
                    for t in answer["topics"]:
                        for p in t["partitions"]:
                            if p["error_code"] != ErrorCode.NONE:
                                raise DescribeError(f"ListOffsets {_TIMESTAMP_NAMES[timestamp]} ({timestamp}) for "
                                                    f"{t['name']}-{p['partition_index']}: {_error_name(p['error_code'])}")
                            offsets[(p["partition_index"], timestamp)] = p["offset"]
            state, *_, owner, _ = remote.get((name, None), ("-", 0, 0, 0, 0, 0, "none", -1))
            for p in sorted(partitions):
                _, segments, size, lag, lost, diverged, _, stored = remote.get(
                    (name, p), (state, 0, 0, 0, 0, 0, owner, 0))
                ry = offsets.get((p, LATEST_TIERED), -1)
                rows.append(PartitionRow(name, p, offsets.get((p, EARLIEST)) if ry >= 0 else None,
                                         ry if ry >= 0 else None, offsets.get((p, EARLIEST_LOCAL), -1),
                                         offsets.get((p, LATEST), -1), segments, size, lag, state, lost,
                                         diverged, owner, stored))
        return rows
    finally:
        client.close()


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error code {code}"


def _unreachable(bootstrap: str, error: BrokerClientError) -> DescribeError:
    """Why nothing answered, per address: BrokerClientError's text is about brokers, and the
    operator is looking for a proxy."""
    reasons = []
    for address in (a.strip() for a in bootstrap.split(",") if a.strip()):
        host, _, port = address.rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
        except (OSError, ValueError) as e:
            reasons.append(f"{address} ({getattr(e, 'strerror', None) or e})")
        else:  # something listens there, but does not speak Kafka (or hung up)
            if isinstance(error, AuthenticationRequiredError):
                return DescribeError(f"{error}: pass the cluster's client settings (security.protocol, sasl.*) "
                                     "with --command-config")
            return NoProxyError(f"{address} does not answer as Kafka ({error}); describe needs the address "
                                "of a running tiered-proxy")
    return NoProxyError(f"nothing answers at {'; '.join(reasons)}: describe needs the address of a running "
                         "tiered-proxy")


def _not_the_proxy(bootstrap: str) -> DescribeError:
    return NoProxyError(f"{bootstrap} answers as a Kafka broker, not as tiered-proxy: describe needs the proxy's "
                         "address (it cannot see the remote tier through a broker)")


def _topics(client: BrokerClient, node: int, topic: str | None) -> dict[str, dict[int, int]]:
    """Topic -> partition -> leader, from a Metadata answer whose error codes are all checked
    (BrokerClient.metadata leaves failed topics out, which would make a missing topic an empty
    table)."""
    versions = client.supported(node, METADATA)
    version = min(versions[1], METADATA_VERSION) if versions is not None else 1
    body = {"topics": None if topic is None else [{"name": topic, "topic_id": bytes(16)}],
            "allow_auto_topic_creation": False, "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False}
    answer: dict[str, Any] = client.request(node, METADATA, version, body)
    found: dict[str, dict[int, int]] = {}
    for t in answer["topics"]:
        name = t["name"]
        if t["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise DescribeError(f"topic {name!r} does not exist (Metadata: UNKNOWN_TOPIC_OR_PARTITION)")
        if t["error_code"] != ErrorCode.NONE:
            raise DescribeError(f"Metadata for topic {name!r}: {_error_name(t['error_code'])}")
        if topic is None and (t.get("is_internal") or name.startswith("__")):
            continue  # Kafka's own topics, unless asked for by name
        partitions: dict[int, int] = {}
        for p in t["partitions"]:
            # REPLICA_NOT_AVAILABLE only says a follower is down; the leader answers.
            if p["error_code"] not in (ErrorCode.NONE, ErrorCode.REPLICA_NOT_AVAILABLE) or p["leader_id"] < 0:
                raise DescribeError(f"Metadata for {name}-{p['partition_index']}: "
                                    f"{_error_name(p['error_code']) if p['error_code'] else 'no leader'}")
            partitions[p["partition_index"]] = p["leader_id"]
        found[name] = partitions
    if topic is not None and topic not in found:
        raise DescribeError(f"topic {topic!r} does not exist (Metadata left it out)")
    return found


def _remote_log_dir(client: BrokerClient, node: int, bootstrap: str, costs: dict[str, TopicCost] | None = None,
                    ) -> dict[tuple[str, int | None], tuple[str, int, int, int, int, int, str]]:
    """(topic, partition) -> (state, segments, bytes, lag, offsets lost, offsets diverged, who tiers
    the topic); (topic, None) -> the topic's state and who tiers it. ``costs``: filled with each
    topic's last hour where the proxy reports it.
    The proxy offers ListOffsets LATEST_TIERED and adds a ``remote:`` log dir to DescribeLogDirs
    whatever the broker; anything that does neither is not the proxy."""
    list_offsets = client.supported(node, LIST_OFFSETS)
    versions = client.supported(node, DESCRIBE_LOG_DIRS)
    if versions is None or list_offsets is None or list_offsets[1] < LIST_OFFSETS_VERSION:
        raise _not_the_proxy(bootstrap)
    answer = client.request(node, DESCRIBE_LOG_DIRS, min(versions[1], 4), {"topics": None})
    if answer.get("error_code", ErrorCode.NONE) != ErrorCode.NONE:
        raise DescribeError(f"DescribeLogDirs: {_error_name(answer['error_code'])}")
    remote_dirs = [r for r in answer["results"] if r["log_dir"].startswith(REMOTE_LOG_DIR_PREFIX)]
    if not remote_dirs:
        raise _not_the_proxy(bootstrap)
    found: dict[tuple[str, int | None], tuple[str, int, int, int, int, int, str, int]] = {}
    for result in remote_dirs:
        if result["error_code"] != ErrorCode.NONE:
            raise DescribeError(f"DescribeLogDirs {result['log_dir']}: {_error_name(result['error_code'])}")
        for t in result["topics"]:
            raw_state = (t.get("_unknown_tags") or {}).get(TAG_TIERING_STATE)
            state = raw_state.decode() if raw_state else "-"
            raw_owner = (t.get("_unknown_tags") or {}).get(TAG_TIERED_BY)
            owner = raw_owner.decode() if raw_owner else "-"
            found[(t["name"], None)] = (state, 0, 0, 0, 0, 0, owner, -1)
            raw_cost = (t.get("_unknown_tags") or {}).get(TAG_TOPIC_COST)
            if costs is not None and raw_cost:
                costs[t["name"]] = decode_topic_cost(t["name"], raw_cost)
            for p in t["partitions"]:
                tags = p.get("_unknown_tags") or {}
                raw_count, raw_loss = tags.get(TAG_SEGMENT_COUNT), tags.get(TAG_DATA_LOSS)
                count = SEGMENT_COUNT.unpack(raw_count)[0] if raw_count else 0
                lost = DATA_LOSS.unpack(raw_loss)[0] if raw_loss else 0
                raw_diverged = tags.get(TAG_DIVERGENCE)
                diverged = DIVERGENCE.unpack(raw_diverged)[0] if raw_diverged else 0
                raw_stored = tags.get(TAG_STORED_BYTES)
                stored = STORED_BYTES.unpack(raw_stored)[0] if raw_stored else -1
                found[(t["name"], p["partition_index"])] = (state, count, p["partition_size"], p["offset_lag"], lost,
                                                            diverged, owner, stored)
    return found


def format_rows(rows: list[PartitionRow]) -> str:
    header = ("TOPIC", "PARTITION", "Rx", "Ry", "Lx", "Lz", "SEGMENTS", "REMOTE-BYTES", "STORED-BYTES", "LAG", "LOST",
              "DIVERGED", "TIERED-BY", "TIERING")
    lines = [header] + [(r.topic, str(r.partition), "-" if r.rx is None else str(r.rx), "-" if r.ry is None else str(r.ry),
                         str(r.lx), str(r.lz), str(r.segments), str(r.remote_bytes),
                         "-" if r.stored_bytes < 0 else str(r.stored_bytes), str(r.lag), str(r.lost),
                         str(r.diverged), r.tiered_by, r.state)
                        for r in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in lines)


# -- describe --cost --------------------------------------------------------------------------------


def describe_costs(bootstrap: str, topic: str | None = None, security: ClientSecurity | None = None) -> list[TopicCost]:
    """Each tiered topic's last hour as the proxy at ``bootstrap`` reports it (the topics its
    remote log dir lists; ``topic``: that one, which must exist). NoProxyError when no proxy
    answers there."""
    client = BrokerClient(bootstrap, security=security)
    try:
        try:
            client.metadata([])
        except BrokerClientError as e:
            raise _unreachable(bootstrap, e) from None
        if not client.brokers:
            raise DescribeError(f"{bootstrap} answered Metadata with no brokers")
        node = min(client.brokers)
        costs: dict[str, TopicCost] = {}
        listed = {name for name, _ in _remote_log_dir(client, node, bootstrap, costs)}
        if topic is not None:
            _topics(client, node, topic)  # says so when it does not exist
        wanted = sorted(listed if topic is None else listed & {topic})
        missing = [name for name in wanted if name not in costs]
        if missing:
            raise DescribeError(f"the proxy at {bootstrap} reports no cost for {missing[0]} (a tiered-proxy from before "
                                "costs per topic)")
        return [costs[name] for name in wanted]
    finally:
        client.close()


def stored_costs(metadata_uri: str, bootstrap: str | None, security: ClientSecurity | None, prices: Prices,
                 topic: str | None = None) -> list[TopicCost]:
    """Each topic's hour of storage from the metadata store alone (no request counts: those live
    in a running proxy)."""
    from tiering.metadata.view import load_metadata
    from tiering.topic_costs import stored_bytes_by_topic

    state = load_metadata(metadata_uri, bootstrap, security=security)
    held = stored_bytes_by_topic(list(state.partitions), state.finished)
    return [topic_cost(name, {}, stored, 0.0, prices) for name, stored in sorted(held.items())
            if topic is None or name == topic]


def format_costs(rows: list[TopicCost], with_requests: bool = True) -> str:
    """One line per topic: the last hour's counts and cost, and a month projected (x 730)."""
    header = ("TOPIC", "GET", "PUT", "DELETE", "LIST", "BYTES-READ", "BYTES-WRITTEN", "STORED-BYTES", "REQUESTS",
              "TRANSFER", "STORAGE", "HOUR", f"MONTH(x{HOURS_PER_MONTH})")
    lines = [header]
    for c in rows:
        counts = [str(c.counts.get(k, 0)) if with_requests else "-"
                  for k in ("GET", "PUT", "DELETE", "LIST", "bytes_read", "bytes_written")]
        lines.append((c.topic, *counts, str(c.stored_bytes), money(c.hour.requests) if with_requests else "-",
                      money(c.hour.transfer) if with_requests else "-", money(c.hour.storage), money(c.hour.total),
                      money(c.month.total)))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``describe``'s own arguments (the CLI adds ``--command-config``)."""
    parser.add_argument("--bootstrap-servers", metavar="HOST:PORT",
                        help="the proxy (not a broker: only the proxy sees the remote tier); required unless "
                             "--cost reads a file:// metadata store")
    parser.add_argument("--topic", help="only this topic")
    parser.add_argument("--cost", action="store_true",
                        help="each tiered topic's remote-tier cost: the last hour (requests, bytes, one hour of "
                             "storage) and a month projected (x 730)")
    parser.add_argument("--metadata", metavar="URI",
                        help="with --cost, when no proxy answers: the metadata store (file:///DATA_DIR/metadata or "
                             "topic://NAME), for the storage cost alone")
    parser.add_argument("--config", type=Path, metavar="FILE.properties",
                        help="with --cost: prices (remote.log.storage.price.*) to price with instead of the proxy's")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="with --cost: one price key, as in --config (repeatable)")


_PRICE_KEYS = frozenset((*Prices.KEYS.values(), PRICE_CURRENCY_CONFIG))


def _price_props(args: argparse.Namespace) -> dict[str, str]:
    """The price keys of ``--config`` (the proxy's own properties: its other keys are not
    describe's business) and ``--set`` (price keys only)."""
    props = resolve_references(load_properties(args.config)) if args.config else {}
    props = {k: v for k, v in props.items() if k in _PRICE_KEYS}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        if key.strip() not in _PRICE_KEYS:
            raise ConfigError(f"describe --set takes the price keys (remote.log.storage.price.*), not {key.strip()!r}")
        props[key.strip()] = value.strip()
    return props


def run(args: argparse.Namespace, security: ClientSecurity | None = None) -> int:
    """``tiered-proxy describe``: 0, or 1 with one line on stderr; a bad price is a ValueError
    (a configuration error)."""
    try:
        if not args.cost:
            if not args.bootstrap_servers:
                raise ConfigError("describe needs --bootstrap-servers (the proxy)")
            print(format_rows(describe(args.bootstrap_servers, args.topic, security)))
            return 0
        props = _price_props(args)
        prices = Prices.from_config(props)
        if not args.bootstrap_servers and not args.metadata:
            raise ConfigError("describe --cost needs --bootstrap-servers (the proxy) or --metadata (its store)")
        try:
            if not args.bootstrap_servers:
                raise NoProxyError("no proxy named (--bootstrap-servers)")
            rows = describe_costs(args.bootstrap_servers, args.topic, security)
        except NoProxyError as e:
            if not args.metadata:
                raise
            rows = stored_costs(args.metadata, args.bootstrap_servers, security, prices, args.topic)
            print(format_costs(rows, with_requests=False))
            why = re.split(r"[:;] describe needs", str(e), maxsplit=1)[0]  # the reason, not the advice
            print(f"{why}; from the metadata store {args.metadata}: storage only, one hour at "
                  f"{prices.storage_gb_month:g} {prices.currency} per GB-month (HOUR), a month projected as that hour "
                  f"x {HOURS_PER_MONTH}; request costs need a running proxy", file=sys.stderr)
            return 0
        if props:
            rows = [topic_cost(c.topic, c.counts, c.stored_bytes, c.window_s, prices) for c in rows]
        print(format_costs(rows))
        window = min((c.window_s for c in rows), default=3600.0)
        print(f"cost in {rows[0].currency if rows else prices.currency}, "
              + ("at the prices given" if props else "as the proxy prices it")
              + f": HOUR is the last hour, the requests and bytes the proxy at {args.bootstrap_servers} sent to the "
              f"remote tier for each topic in {window_text(window)} plus one hour of its storage; "
              f"MONTH is projected, the last hour x {HOURS_PER_MONTH}", file=sys.stderr)
        return 0
    except (BrokerClientError, DescribeError, OSError) as e:
        print(f"tiered-proxy: {e}", file=sys.stderr)
        return 1
