"""A SASL-only cluster end to end: the proxy logs in with its own credentials and tiers; clients
log in through the proxy with theirs and read the whole history from offset 0; a client the
cluster refuses gets the cluster's refusal also for offsets only the remote tier holds.

The cluster is a real noida-db behind tests/sasl_gateway.py, which authenticates (PLAIN, SCRAM on
scramp) and authorizes topic reads as a broker would: neither installable broker can let a SCRAM
client in (noida-db has no SASL; Tansu 0.6 stores no credentials, see test_sasl_tansu.py). The
topic is created and filled on the broker directly, as an operator would, before any proxy runs.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from proxy.embedded_broker import EmbeddedBroker, start_broker
from tests.proxy_process import ProxyProcess, free_port, start_proxy
from tests.sasl_gateway import SaslGateway, User
from tests.tiering_checks import create_tiered_topic, produce_numbered, wait_until
from tiering.broker_client import EARLIEST, BrokerClient

NOIDA_NODE = 1
PARTITIONS = 3
MESSAGES = 12_000
PASSWORDS = {"tiered-proxy": "proxy-pw-3c81f0", "alice": "alice-pw-9e24b7", "bob": "bob-pw-d05a6c"}
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
REMOTE_BYTES = "kafka_server_brokertopicmetrics_remotefetchbytespersec_total"


@dataclass
class Cluster:
    broker: EmbeddedBroker
    gateway: SaslGateway
    proxy: ProxyProcess  # broker-first routing; tiers the topic
    preferred: ProxyProcess  # remote-preferred routing, same remote tier and metadata topic
    topic: str
    untiered: str
    ends: dict[int, int]  # each partition's log end
    log_starts: dict[int, int]  # the broker's log start once tiering had moved it
    metrics: dict[str, str]  # proxy name -> Prometheus URL
    work: Path


def _proxy_args(work: Path, metrics_port: int, *extra: str) -> list[str]:
    return ["--log-level", "DEBUG", "--remote", f"file://{work}/remote", "--metadata", "topic://__remote_log_metadata",
            "--set", "upstream.security.protocol=SASL_PLAINTEXT", "--set", "upstream.sasl.mechanism=SCRAM-SHA-512",
            "--set", f'upstream.sasl.jaas.config={SCRAM_MODULE} required username="tiered-proxy" '
                     'password="${env:TIERED_PROXY_TEST_PASSWORD}";',
            "--set", "remote.log.manager.task.interval.ms=100", "--set", "remote.log.metadata.topic.num.partitions=3",
            "--set", f"proxy.metrics.listen=127.0.0.1:{metrics_port}", *extra]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    work = tmp_path_factory.mktemp("sasl")
    broker = start_broker("noida", work / "noida")
    topic, untiered = "history", "untiered"
    create_tiered_topic(broker.bootstrap, topic, PARTITIONS, **{"segment.bytes": str(64 * 1024),
                                                              "local.retention.bytes": str(64 * 1024)})
    create_tiered_topic(broker.bootstrap, untiered, 1, **{"remote.storage.enable": "false"})
    produce_numbered(broker.bootstrap, topic, 0, MESSAGES, PARTITIONS)
    produce_numbered(broker.bootstrap, untiered, 0, 500, 1)
    gateway = SaslGateway(("127.0.0.1", broker.port), {
        "tiered-proxy": User(PASSWORDS["tiered-proxy"]),
        "alice": User(PASSWORDS["alice"]),
        "bob": User(PASSWORDS["bob"], topics={"bob-only"}),
    })
    os.environ["TIERED_PROXY_TEST_PASSWORD"] = PASSWORDS["tiered-proxy"]  # ${env:...} in the proxy's settings
    ports = {"proxy": free_port(), "preferred": free_port()}
    proxy = start_proxy(gateway.bootstrap, work / "proxy", *_proxy_args(work, ports["proxy"]), node_ids=[NOIDA_NODE])
    preferred = None
    try:
        direct = BrokerClient(broker.bootstrap)
        leader = direct.metadata([topic])[topic].partitions[0].leader
        ends = {p: direct.list_offset(leader, topic, p, -1)[1] for p in range(PARTITIONS)}

        def log_starts() -> dict[int, int]:
            return {p: direct.list_offset(leader, topic, p, EARLIEST)[1] for p in range(PARTITIONS)}

        assert wait_until(lambda: all(s > ends[p] // 2 for p, s in log_starts().items()), 120), \
            (log_starts(), proxy.log_text()[-3000:])
        preferred = start_proxy(gateway.bootstrap, work / "preferred",
                                *_proxy_args(work, ports["preferred"], "--set", "proxy.fetch.routing.policy=remote-preferred"),
                                node_ids=[NOIDA_NODE])
        yield Cluster(broker, gateway, proxy, preferred, topic, untiered, ends, log_starts(),
                      {name: f"http://127.0.0.1:{port}/metrics" for name, port in ports.items()}, work)
    finally:
        for p in (proxy, preferred):
            if p is not None:
                p.stop()
        os.environ.pop("TIERED_PROXY_TEST_PASSWORD", None)
        gateway.close()
        broker.stop()


def _remote_bytes(url: str, topic: str) -> float:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples
               if s.name == REMOTE_BYTES and s.labels.get("topic") == topic)


# -- the three client libraries, each with its own credentials --------------------------------------

def _kafka_python(bootstrap: str, topic: str, user: str, password: str, mechanism: str, until: dict[int, int],
                  timeout: float = 60) -> dict[int, list[int]]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism,
                             sasl_plain_username=user, sasl_plain_password=password, enable_auto_commit=False,
                             request_timeout_ms=10_000, bootstrap_timeout_ms=int(min(timeout, 30) * 1000))
    try:
        tps = [TopicPartition(topic, p) for p in until]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        got: dict[int, list[int]] = {p: [] for p in until}
        deadline = time.monotonic() + timeout
        while any(len(got[p]) < until[p] for p in until) and time.monotonic() < deadline:
            for tp, records in consumer.poll(1000).items():
                got[tp.partition] += [r.offset for r in records]
        return got
    finally:
        consumer.close()


def _confluent(bootstrap: str, topic: str, user: str, password: str, mechanism: str, until: dict[int, int],
               timeout: float = 60) -> dict[int, list[int]]:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
                         "sasl.username": user, "sasl.password": password, "group.id": f"sasl-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "receive.message.max.bytes": 64 << 20})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in until])
        got: dict[int, list[int]] = {p: [] for p in until}
        deadline = time.monotonic() + timeout
        while any(len(got[p]) < until[p] for p in until) and time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is None:
                continue
            if message.error():
                raise KafkaException(message.error())
            got[message.partition()].append(message.offset())
        return got
    finally:
        consumer.close()


def _aiokafka(bootstrap: str, topic: str, user: str, password: str, mechanism: str, until: dict[int, int],
              timeout: float = 60) -> dict[int, list[int]]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run() -> dict[int, list[int]]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism,
                                    sasl_plain_username=user, sasl_plain_password=password, enable_auto_commit=False,
                                    request_timeout_ms=10_000)
        try:
            await consumer.start()
            tps = [TopicPartition(topic, p) for p in until]
            consumer.assign(tps)
            for tp in tps:
                consumer.seek(tp, 0)
            got: dict[int, list[int]] = {p: [] for p in until}
            deadline = time.monotonic() + timeout
            while any(len(got[p]) < until[p] for p in until) and time.monotonic() < deadline:
                for tp, records in (await consumer.getmany(timeout_ms=1000)).items():
                    got[tp.partition] += [r.offset for r in records]
            return got
        finally:
            await consumer.stop()

    return asyncio.run(asyncio.wait_for(run(), timeout + 30))


READERS = {"kafka-python": (_kafka_python, "PLAIN"), "aiokafka": (_aiokafka, "SCRAM-SHA-256"),
           "confluent": (_confluent, "SCRAM-SHA-512")}


# -- the proxy's own side ----------------------------------------------------------------------

def test_the_proxy_tiers_with_its_own_credentials_and_nothing_else(cluster: Cluster) -> None:
    assert all(start > 0 for start in cluster.log_starts.values()), cluster.log_starts
    assert cluster.gateway.authenticated["tiered-proxy"] > 0
    direct = BrokerClient(cluster.broker.bootstrap)
    leader = direct.metadata([cluster.untiered])[cluster.untiered].partitions[0].leader
    assert direct.list_offset(leader, cluster.untiered, 0, EARLIEST)[1] == 0  # the untiered topic kept its log
    from tiering.client_security import ClientSecurity
    from tiering.metadata.view import load_metadata

    security = ClientSecurity.from_properties({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "tiered-proxy", "sasl.password": PASSWORDS["tiered-proxy"]}, prefix="")
    state = load_metadata("topic://__remote_log_metadata", cluster.gateway.bootstrap, security=security)
    assert {tp.topic for tp in state.partitions} == {cluster.topic}


# -- clients through the proxy ---------------------------------------------------------------------

@pytest.mark.parametrize("library", list(READERS))
def test_clients_read_the_whole_history_with_their_own_credentials(cluster: Cluster, library: str) -> None:
    read, mechanism = READERS[library]
    before = _remote_bytes(cluster.metrics["proxy"], cluster.topic)
    got = read(cluster.proxy.bootstrap, cluster.topic, "alice", PASSWORDS["alice"], mechanism, cluster.ends)
    for p, end in cluster.ends.items():
        assert got[p][:end] == list(range(end)), f"{library} partition {p}: {len(got[p])} of {end}"
    assert _remote_bytes(cluster.metrics["proxy"], cluster.topic) > before  # the start came from the remote tier


def test_remote_preferred_reads_with_a_clients_own_credentials(cluster: Cluster) -> None:
    before = _remote_bytes(cluster.metrics["preferred"], cluster.topic)
    got = _confluent(cluster.preferred.bootstrap, cluster.topic, "alice", PASSWORDS["alice"], "SCRAM-SHA-512", cluster.ends)
    for p, end in cluster.ends.items():
        assert got[p][:end] == list(range(end))
    assert _remote_bytes(cluster.metrics["preferred"], cluster.topic) > before


@pytest.mark.parametrize("library", list(READERS))
def test_a_wrong_password_reads_nothing(cluster: Cluster, library: str) -> None:
    """kafka-python and aiokafka raise; confluent-kafka keeps retrying (and logs why) while its
    consumer reads nothing."""
    read, mechanism = READERS[library]
    failed = cluster.gateway.failed
    try:
        got = read(cluster.proxy.bootstrap, cluster.topic, "alice", "not-the-password", mechanism, {0: 1}, timeout=8)
    except Exception as e:  # noqa: BLE001 - each library names the refusal its own way
        got = {}
        assert library != "confluent", e
    else:
        assert library == "confluent"
    assert not any(got.values())
    assert cluster.gateway.failed > failed


@pytest.mark.parametrize("proxy", ["proxy", "preferred"])
def test_a_refused_principal_gets_the_refusal_and_not_one_remote_byte(cluster: Cluster, proxy: str) -> None:
    """bob may not read the topic. Client libraries do not even fetch a partition whose metadata
    was refused, so the requests are sent as bob by our own client, for offsets only the remote
    tier holds: Fetch and ListOffsets get the cluster's TOPIC_AUTHORIZATION_FAILED, no records."""
    from protocol.errors import ErrorCode
    from tiering.client_security import ClientSecurity

    target = cluster.proxy if proxy == "proxy" else cluster.preferred
    before = _remote_bytes(cluster.metrics[proxy], cluster.topic)
    denied = cluster.gateway.denied["bob"]
    bob = BrokerClient(target.bootstrap, security=ClientSecurity.from_properties({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "bob", "sasl.password": PASSWORDS["bob"]}, prefix=""))
    try:
        bob.metadata([cluster.topic])
        assert bob.topic_errors == {cluster.topic: ErrorCode.TOPIC_AUTHORIZATION_FAILED}
        for p in range(PARTITIONS):
            assert 0 < cluster.log_starts[p]  # offset 0 is only in the remote tier
            answer = bob.fetch(NOIDA_NODE, cluster.topic, p, 0, max_bytes=1 << 20)
            assert (answer.error_code, bytes(answer.records)) == (ErrorCode.TOPIC_AUTHORIZATION_FAILED, b"")
            assert bob.list_offset(NOIDA_NODE, cluster.topic, p, EARLIEST)[0] == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    finally:
        bob.close()
    assert cluster.gateway.denied["bob"] >= denied + 2 * PARTITIONS
    assert _remote_bytes(cluster.metrics[proxy], cluster.topic) == before


# -- our tools with their own credentials ------------------------------------------------------------

def _command_config(cluster: Cluster, user: str) -> Path:
    path = cluster.work / f"{user}.properties"
    path.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
                    f'sasl.jaas.config={SCRAM_MODULE} required username="{user}" password="{PASSWORDS[user]}";\n')
    return path


def test_describe_and_segments_take_a_command_config(cluster: Cluster) -> None:
    config = _command_config(cluster, "alice")
    cli = [sys.executable, "-m", "proxy.cli"]
    described = subprocess.run([*cli, "describe", "--bootstrap-servers", cluster.proxy.bootstrap, "--topic", cluster.topic,
                                "--command-config", str(config)], capture_output=True, text=True, timeout=60)
    assert described.returncode == 0, described.stderr
    assert len([line for line in described.stdout.splitlines() if line.startswith(cluster.topic)]) == PARTITIONS
    segments = subprocess.run([*cli, "segments", "--metadata", "topic://__remote_log_metadata", "--bootstrap-servers",
                               cluster.gateway.bootstrap, "--topic", cluster.topic, "--command-config", str(config)],
                              capture_output=True, text=True, timeout=60)
    assert segments.returncode == 0, segments.stderr
    assert "COPY_SEGMENT_FINISHED" in segments.stdout
    unauthenticated = subprocess.run([*cli, "describe", "--bootstrap-servers", cluster.proxy.bootstrap],
                                     capture_output=True, text=True, timeout=90)
    assert unauthenticated.returncode == 1 and unauthenticated.stderr.count("\n") == 1, unauthenticated.stderr
    assert "then closed the connection on Metadata (if the cluster requires SASL: this client has no SASL " \
           "settings)" in unauthenticated.stderr
    assert unauthenticated.stderr.endswith("with --command-config\n")


def _spark_options(cluster: Cluster, user: str) -> dict[str, Any]:
    return {"kafka.bootstrap.servers": cluster.proxy.bootstrap, "subscribe": cluster.topic,
            "remote.log.storage.uri": f"file://{cluster.work}/remote",
            "remote.log.metadata.uri": "topic://__remote_log_metadata",
            "kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.jaas.config": f'{SCRAM_MODULE} required username="{user}" password="{PASSWORDS[user]}";'}


def test_the_spark_source_plans_only_what_the_jobs_principal_may_read(cluster: Cluster) -> None:
    from tiering.spark.source import RemoteSplit, TailSplit, TieredKafkaBatchReader, TopicAuthorizationError

    splits = TieredKafkaBatchReader(_spark_options(cluster, "alice")).partitions()
    assert any(isinstance(s, RemoteSplit) for s in splits) and all(isinstance(s, RemoteSplit | TailSplit) for s in splits)
    with pytest.raises(TopicAuthorizationError, match=rf"not authorized to read topic {cluster.topic}"):
        TieredKafkaBatchReader(_spark_options(cluster, "bob") | {"assign": f'{{"{cluster.topic}": [0]}}',
                                                                 "subscribe": ""}).partitions()


# -- last: nothing secret in the proxies' DEBUG logs -----------------------------------------------

def test_zz_no_password_in_the_proxy_logs(cluster: Cluster) -> None:
    for proxy in (cluster.proxy, cluster.preferred):
        text = proxy.log_text()
        assert "DEBUG" in text and "[hidden]" in text  # kafka-python logged its configuration, redacted
        for user, password in PASSWORDS.items():
            assert password not in text, f"{user}'s password in {proxy.log_path}"


# -- KIP-368 re-authentication -------------------------------------------------------------------

def test_reauthentication_passes_through_and_our_own_client_renews_its_session(cluster: Cluster, tmp_path: Path) -> None:
    """A cluster whose sessions last 3 s: librdkafka re-authenticates on the connection it has
    through the proxy (the broker side counts it), and the proxy's own client logs in anew before
    its session ends, so the broker never has to close an expired session."""
    from confluent_kafka import Consumer, TopicPartition

    from tiering.client_security import ClientSecurity

    with SaslGateway(("127.0.0.1", cluster.broker.port), {"alice": User(PASSWORDS["alice"])},
                     session_lifetime_ms=3000) as gateway:
        proxy = start_proxy(gateway.bootstrap, tmp_path, "--set", "remote.log.storage.system.enable=false",
                            node_ids=[NOIDA_NODE])
        consumer = Consumer({"bootstrap.servers": proxy.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                             "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
                             "sasl.password": PASSWORDS["alice"], "group.id": "reauth", "enable.auto.commit": False})
        ours = BrokerClient(gateway.bootstrap, security=ClientSecurity.from_properties({
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": "alice", "sasl.password": PASSWORDS["alice"]}, prefix=""))
        try:
            consumer.assign([TopicPartition(cluster.untiered, 0, 0)])
            read = 0
            deadline = time.monotonic() + 8  # more than two session lifetimes
            while time.monotonic() < deadline:
                message = consumer.poll(0.5)
                read += message is not None and message.error() is None
                ours.metadata([cluster.untiered])  # our client keeps using its connection
            assert read == 500  # the whole untiered topic, and the connection stayed usable
            assert gateway.reauthenticated["alice"] > 0
            assert gateway.closed_expired == 0
            assert gateway.authenticated["alice"] >= 3  # includes our client's fresh logins
        finally:
            consumer.close()
            ours.close()
            proxy.stop()
