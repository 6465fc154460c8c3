"""Which API versions each party speaks: Kafka's schemas as the proxy ships them, each test
broker, the proxy in front of each, and each client library through the proxy.

    python -m tests.api_matrix

Starts noida-db and Tansu and asks each for ApiVersions, directly and through a proxy. Then, on
Tansu, runs each client library through a proxy of its own that logs every request's API and
version (``--log-level DEBUG``), doing what applications do: create a topic, produce with every
codec, read it in a consumer group with commits, read it again by assignment from offset 0,
describe and delete the topic. Prints one markdown row per API any party knows: the version
range of the schemas, of each broker and of the proxy in front of it, and the versions each
client sent. Two columns are computed, not measured, since no Kafka runs here: Kafka 4.2's
ApiVersions as kafka-python records them, and what the proxy's negotiation (tiering on) offers in
front of it. tests/UPSTREAMS.md keeps the table.
"""

from __future__ import annotations

import re
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from kafka.protocol.broker_version_data import BROKER_API_VERSIONS

from protocol.apis import API_VERSIONS, all_apis
from proxy.embedded_broker import EmbeddedBroker, start_broker
from proxy.filters.address_rewriting import AddressRewriting
from proxy.filters.fetch_sessions import FetchSessions
from proxy.filters.remote_log_dirs import RemoteLogDirs
from proxy.filters.tiered_offsets import TieredOffsets
from proxy.filters.tiered_reads import TieredReads
from proxy.filters.topic_admin import TopicAdmin
from proxy.server import negotiate_versions
from tests.clients import CLIENTS, COMPRESSIONS, GroupMember, Rec, admin_round_trip, consume_all, produce
from tests.proxy_process import start_proxy
from tests.raw import RawClient

BROKERS = ("noida", "tansu")
RECORDED_KAFKA = (4, 2)
Ranges = dict[int, tuple[int, int]]
SENT = re.compile(r"client \S+ sent (\w+) v(\d+)")


def offered_with_tiering(broker: dict[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
    """What `tiered-proxy serve` (tiering on, as by default) offers in front of ``broker``."""
    read = (AddressRewriting.apis | FetchSessions.apis | TieredReads.apis | TieredOffsets.apis | TopicAdmin.apis
            | RemoteLogDirs.apis)
    return negotiate_versions(broker, TieredReads.version_caps,
                              {**TieredOffsets.version_overrides, **RemoteLogDirs.version_overrides}, read)


def api_versions(bootstrap: str) -> Ranges:
    client = RawClient(bootstrap)
    try:
        answer = client.request(API_VERSIONS, 3, {"client_software_name": "api-matrix", "client_software_version": "1"})
    finally:
        client.close()
    return {k["api_key"]: (k["min_version"], k["max_version"]) for k in answer["api_keys"]}


def exercise(client: str, bootstrap: str, topic: str) -> None:
    """What an application does with the client library, through ``bootstrap``."""
    admin_round_trip(client, bootstrap, f"{topic}-admin", 2)
    records = [Rec(partition=i % 3, key=str(i).encode(), value=b"v" * 100) for i in range(300)]
    for codec in COMPRESSIONS:
        produce(client, bootstrap, topic, records, compression=codec)
    total = len(records) * len(COMPRESSIONS)
    member = GroupMember(client, bootstrap, topic, f"{topic}-group")
    try:
        deadline = time.monotonic() + 60
        while len(member.seen) < total and time.monotonic() < deadline:
            member.poll(0.5)
        member.commit()
    finally:
        member.close()
    consume_all(client, bootstrap, topic, 3, total, timeout=60)


def client_versions(broker: EmbeddedBroker, work: Path) -> dict[str, dict[str, set[int]]]:
    """Per client library: API name -> the versions it sent through a proxy."""
    sent: dict[str, dict[str, set[int]]] = {}
    for client in CLIENTS:
        proxy = start_proxy(broker.bootstrap, work / client, "--log-level", "DEBUG",
                            "--set", "remote.log.storage.system.enable=false")
        try:
            exercise(client, proxy.bootstrap, f"matrix-{client}")
        finally:
            proxy.stop()
        versions: dict[str, set[int]] = defaultdict(set)
        for name, version in SENT.findall(proxy.log_text()):
            versions[name].add(int(version))
        sent[client] = versions
    return sent


def span(r: tuple[int, int] | None) -> str:
    return "-" if r is None else f"{r[0]}-{r[1]}" if r[0] != r[1] else str(r[0])


def used(versions: set[int] | None) -> str:
    return "" if not versions else ", ".join(str(v) for v in sorted(versions))


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="api-matrix-"))
    direct: dict[str, Ranges] = {}
    offered: dict[str, Ranges] = {}
    sent: dict[str, dict[str, set[int]]] = {}
    for kind in BROKERS:
        broker = start_broker(kind, work / kind)
        try:
            direct[kind] = api_versions(broker.bootstrap)
            proxy = start_proxy(broker.bootstrap, work / f"proxy-{kind}")
            try:
                offered[kind] = api_versions(proxy.bootstrap)
            finally:
                proxy.stop()
            if kind == "tansu":
                sent = client_versions(broker, work / "clients")
        finally:
            broker.stop()
    kafka = BROKER_API_VERSIONS[RECORDED_KAFKA]
    on_kafka = offered_with_tiering(kafka)
    kafka_name = "kafka {}.{}".format(*RECORDED_KAFKA)
    schemas = {key: (api.min_version, api.max_version) for key, api in all_apis().items()}
    names = {key: api.name for key, api in all_apis().items()}
    keys = sorted(set(schemas) | {k for ranges in direct.values() for k in ranges} | set(kafka))
    header = ["key", "API", "schemas", *(f"{k}" for k in BROKERS), f"{kafka_name} (recorded)",
              *(f"proxy on {k}" for k in BROKERS), f"proxy on {kafka_name} (computed)",
              *(f"{c} sent" for c in CLIENTS)]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for key in keys:
        name = names.get(key, "(not in the schemas)")
        cells = [str(key), name, span(schemas.get(key)), *(span(direct[k].get(key)) for k in BROKERS),
                 span(kafka.get(key)), *(span(offered[k].get(key)) for k in BROKERS), span(on_kafka.get(key)),
                 *(used(sent[c].get(name)) for c in CLIENTS)]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
