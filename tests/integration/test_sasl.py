"""A SASL-only Apache Kafka 4.4 end to end: the proxy logs in with its own SCRAM credentials and
tiers; clients log in through the proxy with theirs and read the whole history from offset 0; a
principal the cluster refuses gets the cluster's refusal also for offsets only the remote tier holds.

Every login and every authorization decision here is Kafka's own: the ``kafka_secure`` cluster
(tests/kafka_cluster.py) has no unauthenticated client listener, SCRAM-SHA-256/512 users, and the
StandardAuthorizer with ``allow.everyone.if.no.acl.found=false``. Users and ACLs are made by Kafka's
admin API as its super user. What the broker did is read back from the broker itself: its log
(failed authentications at INFO; the authorizer's decisions, at DEBUG where a test turns the
``kafka.authorizer.logger`` up through Kafka's dynamic broker-logger config).

Two proxies share one remote tier and metadata topic:
- ``plain``: SASL_PLAINTEXT on both sides (clients to the proxy, the proxy to Kafka's SASL_PLAINTEXT
  listener), broker-first routing; it tiers the topic;
- ``tls``: SASL_SSL on both sides (a TLS listener toward clients; TLS to Kafka's SASL_SSL listener,
  trusting the cluster's CA), remote-preferred routing; its own credentials come from a file
  (``${file:...}``), the first proxy's from the environment (``${env:...}``).

Kafka 4.4 without native tiered storage refuses ``remote.storage.enable`` itself, so the topic is
tiered through the proxy (which keeps that key), with the copier's segment size from the proxy's
``log.segment.bytes`` (Kafka 4.4 refuses a topic ``segment.bytes`` under 1 MiB) and local retention
done by the proxy with DeleteRecords (``local.retention.bytes``, also set through the proxy).
"""

from __future__ import annotations

import asyncio
import os
import re
import ssl
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.kafka_cluster import SECURE_USERS, KafkaCluster, create_acls, start_secure
from tests.proxy_process import ProxyProcess, free_port, start_proxy
from tests.tiering_checks import produce_numbered, wait_until
from tiering.broker_client import EARLIEST, LATEST, BrokerClient
from tiering.client_security import ClientSecurity
from tiering.copy.ownership import DEFAULT_GROUP_ID as OWNERSHIP_GROUP

NODE = 1  # the secure cluster's one broker
PARTITIONS = 3
MESSAGES = 12_000
SEGMENT_BYTES = 64 * 1024
PROXY_USER = "tiered-proxy"
PROXY_PASSWORD = "proxy-pw-3c81f0"  # noqa: S105 - a test credential, grepped for in the logs
METADATA_TOPIC = "__remote_log_metadata"
GROUP_PREFIX = "sasl-"  # consumer groups alice may use
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
REMOTE_BYTES = "kafka_server_brokertopicmetrics_remotefetchbytespersec_total"
PASSWORD_ENV = "TIERED_PROXY_TEST_PASSWORD"
FAILED_AUTHENTICATION = "Failed authentication with /127.0.0.1"


@dataclass
class Target:
    """A proxy and how a client reaches it."""

    proxy: ProxyProcess
    protocol: str  # SASL_PLAINTEXT or SASL_SSL
    metrics: str  # Prometheus URL

    @property
    def bootstrap(self) -> str:
        return self.proxy.bootstrap


@dataclass
class Cluster:
    kafka: KafkaCluster
    targets: dict[str, Target]  # "plain" (broker-first; tiers the topic), "tls" (remote-preferred)
    topic: str
    untiered: str
    ends: dict[int, int]  # each partition's log end
    log_starts: dict[int, int]  # the broker's log start once tiering had moved it
    authorizer_log: str  # the broker's authorizer decisions (DEBUG) while the proxy tiered
    work: Path

    @property
    def ca(self) -> str:
        return str(self.kafka.certs.ca)

    def password(self, user: str) -> str:
        return PROXY_PASSWORD if user == PROXY_USER else self.kafka.users[user]

    def security(self, user: str, protocol: str = "SASL_PLAINTEXT", mechanism: str = "SCRAM-SHA-512",
                 password: str | None = None) -> ClientSecurity:
        return _security(self.kafka, user, protocol, mechanism, password)

    def direct(self, user: str = "admin") -> BrokerClient:
        """Our own client on Kafka's SASL_PLAINTEXT listener, as ``user``."""
        return _direct(self.kafka, user)

    def broker_log_size(self) -> int:
        return self.kafka.log_path.stat().st_size

    def broker_log_since(self, offset: int) -> str:
        with open(self.kafka.log_path, "rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")


def _security(kafka: KafkaCluster, user: str, protocol: str = "SASL_PLAINTEXT", mechanism: str = "SCRAM-SHA-512",
              password: str | None = None) -> ClientSecurity:
    """Our own clients' settings (tiering/client_security.py) to log in as ``user``."""
    if password is None:
        password = PROXY_PASSWORD if user == PROXY_USER else kafka.users[user]
    props = {"security.protocol": protocol, "sasl.mechanism": mechanism, "sasl.username": user,
             "sasl.password": password}
    if protocol == "SASL_SSL":
        props["ssl.truststore.location"] = str(kafka.certs.ca)
    return ClientSecurity.from_properties(props, prefix="")


def _direct(kafka: KafkaCluster, user: str = "admin", mechanism: str = "SCRAM-SHA-512") -> BrokerClient:
    return BrokerClient(kafka.bootstraps["SASL_PLAINTEXT"], security=_security(kafka, user, mechanism=mechanism))


# -- Kafka's admin API, as the super user ---------------------------------------------------------

def _admin(kafka: KafkaCluster, bootstrap: str | None = None, user: str = "admin") -> Any:
    from kafka.admin import KafkaAdminClient

    kwargs = kafka.admin_kwargs("SASL_PLAINTEXT", user)
    if bootstrap is not None:
        kwargs["bootstrap_servers"] = bootstrap
    return KafkaAdminClient(**kwargs, request_timeout_ms=20_000)


def _set_broker_logger(kafka: KafkaCluster, logger: str, level: str) -> None:
    from kafka.admin import ConfigResource, ConfigResourceType

    admin = _admin(kafka)
    try:
        answer = admin.alter_configs([ConfigResource(ConfigResourceType.BROKER_LOGGER, str(NODE),
                                                     configs={logger: level})], raise_on_unknown=False)
        assert answer == {"broker_logger": {str(NODE): "OK"}}, answer
    finally:
        admin.close()


def _allow(principal: str, resource: Any, *operations: Any) -> list[Any]:
    from kafka.admin import ACL, ACLPermissionType

    return [ACL(f"User:{principal}", "*", operation, ACLPermissionType.ALLOW, resource) for operation in operations]


def _prepare(kafka: KafkaCluster, topic: str, untiered: str) -> None:
    """The proxy's own SCRAM user, the topics, and the ACLs: what an operator does with Kafka's
    admin API before any proxy runs."""
    from kafka.admin import (
        ACLOperation,
        ACLResourcePatternType,
        NewTopic,
        ResourcePattern,
        ResourceType,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    def on_topic(name: str) -> Any:
        return ResourcePattern(ResourceType.TOPIC, name)

    admin = _admin(kafka)
    try:
        for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):  # one per request
            answer = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(PROXY_USER, mechanism,
                                                                                      PROXY_PASSWORD)])
            assert answer == {PROXY_USER: None}, answer
        admin.create_topics([NewTopic(topic, PARTITIONS, 1), NewTopic(untiered, 1, 1)])
        # The proxy's principal: what the copier, local retention, the metadata topic and the copier
        # ownership group need (on the untiered topic too, so that leaving it alone is the proxy's doing).
        acls = []
        for name in (topic, untiered):
            acls += _allow(PROXY_USER, on_topic(name), ACLOperation.READ, ACLOperation.DESCRIBE,
                           ACLOperation.DESCRIBE_CONFIGS, ACLOperation.DELETE)
        acls += _allow(PROXY_USER, on_topic(METADATA_TOPIC), ACLOperation.ALL)
        acls += _allow(PROXY_USER, ResourcePattern(ResourceType.GROUP, OWNERSHIP_GROUP), ACLOperation.READ)
        acls += _allow(PROXY_USER, ResourcePattern(ResourceType.CLUSTER, "kafka-cluster"), ACLOperation.DESCRIBE)
        # alice reads both topics, may use the sasl-* groups, and (for the Spark source and the
        # segments tool) read the metadata topic.
        for name in (topic, untiered):
            acls += _allow("alice", on_topic(name), ACLOperation.READ, ACLOperation.DESCRIBE)
        acls += _allow("alice", on_topic(METADATA_TOPIC), ACLOperation.READ, ACLOperation.DESCRIBE)
        acls += _allow("alice", ResourcePattern(ResourceType.GROUP, GROUP_PREFIX, ACLResourcePatternType.PREFIXED),
                       ACLOperation.READ)
        # mallory may use the same groups, but has no ACL on either topic.
        acls += _allow("mallory", ResourcePattern(ResourceType.GROUP, GROUP_PREFIX, ACLResourcePatternType.PREFIXED),
                       ACLOperation.READ)
        create_acls(admin, acls)
    finally:
        admin.close()


def _produce(kafka: KafkaCluster, topic: str, count: int, partitions: int) -> None:
    """``count`` numbered messages (tests/tiering_checks.py) round-robin, as the admin user."""
    produce_numbered(kafka.bootstraps["SASL_PLAINTEXT"], topic, 0, count, partitions, client={
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "admin",
        "sasl.password": kafka.users["admin"]})


def _tier_through_the_proxy(kafka: KafkaCluster, proxy: ProxyProcess, topic: str) -> None:
    """remote.storage.enable and local.retention.bytes, set by the admin user with kafka-python's
    IncrementalAlterConfigs through the proxy (Kafka itself refuses the first: see the test)."""
    from kafka.admin import ConfigResource, ConfigResourceType

    admin = _admin(kafka, proxy.bootstrap)
    try:
        answer = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={
            "remote.storage.enable": "true", "local.retention.bytes": str(SEGMENT_BYTES)})])
        assert answer == {"topic": {topic: "OK"}}, answer
    finally:
        admin.close()


def _proxy_args(work: Path, metrics_port: int, *extra: str) -> list[str]:
    return ["--log-level", "DEBUG", "--remote", f"file://{work}/remote", "--metadata", f"topic://{METADATA_TOPIC}",
            "--set", "remote.log.manager.task.interval.ms=100", "--set", "remote.log.metadata.topic.num.partitions=3",
            "--set", f"log.segment.bytes={SEGMENT_BYTES}",
            "--set", f"proxy.metrics.listen=127.0.0.1:{metrics_port}", *extra]


@pytest.fixture(scope="module")
def cluster(kafka_secure: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    kafka = kafka_secure
    work = tmp_path_factory.mktemp("sasl")
    suffix = uuid.uuid4().hex[:8]
    topic, untiered = f"history-{suffix}", f"untiered-{suffix}"
    _prepare(kafka, topic, untiered)
    _produce(kafka, topic, MESSAGES, PARTITIONS)
    _produce(kafka, untiered, 500, 1)

    os.environ[PASSWORD_ENV] = PROXY_PASSWORD  # ${env:...} in the plain proxy's settings
    secrets = work / "secrets.properties"  # ${file:...} in the tls proxy's
    secrets.write_text(f"password={PROXY_PASSWORD}\n")
    ports = {"plain": free_port(), "tls": free_port()}
    plain_args = _proxy_args(
        work, ports["plain"],
        "--set", "upstream.security.protocol=SASL_PLAINTEXT", "--set", "upstream.sasl.mechanism=SCRAM-SHA-512",
        "--set", f'upstream.sasl.jaas.config={SCRAM_MODULE} required username="{PROXY_USER}" '
                 f'password="${{env:{PASSWORD_ENV}}}";')
    tls_args = _proxy_args(
        work, ports["tls"], "--set", "proxy.fetch.routing.policy=remote-preferred",
        "--set", f"ssl.keystore.location={kafka.certs.server}",  # the proxy's TLS listener
        "--set", "upstream.security.protocol=SASL_SSL", "--set", "upstream.sasl.mechanism=SCRAM-SHA-256",
        "--set", f"upstream.ssl.truststore.location={kafka.certs.ca}",
        "--set", f"upstream.sasl.username={PROXY_USER}", "--set", f"upstream.sasl.password=${{file:{secrets}:password}}")
    proxies: dict[str, ProxyProcess] = {}
    log_mark = kafka.log_path.stat().st_size
    _set_broker_logger(kafka, "kafka.authorizer.logger", "DEBUG")
    try:
        proxies["plain"] = start_proxy(kafka.bootstraps["SASL_PLAINTEXT"], work / "plain", *plain_args,
                                       node_ids=[NODE])
        _tier_through_the_proxy(kafka, proxies["plain"], topic)
        admin = _direct(kafka)
        try:
            ends = {p: admin.list_offset(NODE, topic, p, LATEST)[1] for p in range(PARTITIONS)}

            def log_starts() -> dict[int, int]:
                return {p: admin.list_offset(NODE, topic, p, EARLIEST)[1] for p in range(PARTITIONS)}

            assert wait_until(lambda: all(s > ends[p] // 2 for p, s in log_starts().items()), 90), \
                (log_starts(), proxies["plain"].log_text()[-3000:])
            starts = log_starts()
        finally:
            admin.close()
        _set_broker_logger(kafka, "kafka.authorizer.logger", "INFO")
        with open(kafka.log_path, "rb") as log:
            log.seek(log_mark)
            authorizer_log = log.read().decode(errors="replace")
        proxies["tls"] = start_proxy(kafka.bootstraps["SASL_SSL"], work / "tls", *tls_args, node_ids=[NODE],
                                     scheme="SSL://")
        targets = {"plain": Target(proxies["plain"], "SASL_PLAINTEXT", f"http://127.0.0.1:{ports['plain']}/metrics"),
                   "tls": Target(proxies["tls"], "SASL_SSL", f"http://127.0.0.1:{ports['tls']}/metrics")}
        yield Cluster(kafka, targets, topic, untiered, ends, starts, authorizer_log, work)
    finally:
        _set_broker_logger(kafka, "kafka.authorizer.logger", "INFO")
        for proxy in proxies.values():
            proxy.stop()
        os.environ.pop(PASSWORD_ENV, None)


def _remote_bytes(target: Target, topic: str) -> float:
    text = urllib.request.urlopen(target.metrics, timeout=10).read().decode()
    return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples
               if s.name == REMOTE_BYTES and s.labels.get("topic") == topic)


# -- the three client libraries, each with its own credentials --------------------------------------

@dataclass
class Login:
    bootstrap: str
    protocol: str  # SASL_PLAINTEXT or SASL_SSL
    user: str
    password: str
    mechanism: str
    ca: str  # the CA that signed the TLS listener's certificate


def _kafka_python(login: Login, topic: str, until: dict[int, int], timeout: float = 60) -> dict[int, list[int]]:
    from kafka import KafkaConsumer, TopicPartition

    tls = {"ssl_cafile": login.ca} if login.protocol == "SASL_SSL" else {}
    consumer = KafkaConsumer(bootstrap_servers=login.bootstrap, security_protocol=login.protocol,
                             sasl_mechanism=login.mechanism, sasl_plain_username=login.user,
                             sasl_plain_password=login.password, enable_auto_commit=False, request_timeout_ms=10_000,
                             bootstrap_timeout_ms=int(min(timeout, 30) * 1000), **tls)
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


def _confluent_config(login: Login) -> dict[str, Any]:
    config = {"bootstrap.servers": login.bootstrap, "security.protocol": login.protocol,
              "sasl.mechanism": login.mechanism, "sasl.username": login.user, "sasl.password": login.password,
              "group.id": f"{GROUP_PREFIX}{uuid.uuid4().hex[:8]}", "enable.auto.commit": False}
    if login.protocol == "SASL_SSL":
        config["ssl.ca.location"] = login.ca
    return config


def _confluent(login: Login, topic: str, until: dict[int, int], timeout: float = 60) -> dict[int, list[int]]:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({**_confluent_config(login), "receive.message.max.bytes": 64 << 20})
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


def _aiokafka(login: Login, topic: str, until: dict[int, int], timeout: float = 60) -> dict[int, list[int]]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run() -> dict[int, list[int]]:
        tls = {"ssl_context": ssl.create_default_context(cafile=login.ca)} if login.protocol == "SASL_SSL" else {}
        consumer = AIOKafkaConsumer(bootstrap_servers=login.bootstrap, security_protocol=login.protocol,
                                    sasl_mechanism=login.mechanism, sasl_plain_username=login.user,
                                    sasl_plain_password=login.password, enable_auto_commit=False,
                                    request_timeout_ms=10_000, **tls)
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


READERS = {"kafka-python": _kafka_python, "confluent": _confluent, "aiokafka": _aiokafka}
# (library, mechanism, proxy): SCRAM-SHA-256 and -512 over SASL_PLAINTEXT and over SASL_SSL.
READS = [("kafka-python", "SCRAM-SHA-256", "plain"), ("confluent", "SCRAM-SHA-512", "plain"),
         ("aiokafka", "SCRAM-SHA-512", "plain"), ("kafka-python", "SCRAM-SHA-512", "tls"),
         ("confluent", "SCRAM-SHA-256", "tls"), ("aiokafka", "SCRAM-SHA-256", "tls")]


def _login(cluster: Cluster, target: str, user: str, mechanism: str, password: str | None = None) -> Login:
    t = cluster.targets[target]
    return Login(t.bootstrap, t.protocol, user, cluster.password(user) if password is None else password,
                 mechanism, cluster.ca)


# -- the proxy's own side ----------------------------------------------------------------------

def test_the_proxy_tiers_with_its_own_credentials_and_nothing_else(cluster: Cluster) -> None:
    assert all(start > 0 for start in cluster.log_starts.values()), cluster.log_starts
    # Kafka's authorizer, at DEBUG while the proxy tiered: the proxy's connections were
    # User:tiered-proxy, and the log start moved by that principal's DeleteRecords.
    deletes = re.findall(r"Principal = (User:\S+) is Allowed operation = DELETE from host = \S+ on resource = "
                         rf"Topic:LITERAL:{re.escape(cluster.topic)} for request = DeleteRecords", cluster.authorizer_log)
    assert deletes and set(deletes) == {f"User:{PROXY_USER}"}, cluster.authorizer_log[-3000:]
    assert f"Principal = User:{PROXY_USER} is Allowed operation = READ" in cluster.authorizer_log
    assert f"Principal = User:{PROXY_USER} is Denied" not in cluster.authorizer_log
    direct = cluster.direct()
    try:
        assert direct.list_offset(NODE, cluster.untiered, 0, EARLIEST)[1] == 0  # the untiered topic kept its log
    finally:
        direct.close()
    from tiering.metadata.view import load_metadata

    state = load_metadata(f"topic://{METADATA_TOPIC}", cluster.kafka.bootstraps["SASL_PLAINTEXT"],
                          security=cluster.security(PROXY_USER, mechanism="SCRAM-SHA-256"))
    assert {tp.topic for tp in state.partitions} == {cluster.topic}


def test_kafka_itself_refuses_the_tiering_key_the_proxy_keeps(cluster: Cluster) -> None:
    """Without native tiered storage, Kafka refuses remote.storage.enable; through the proxy the
    same admin call succeeded (the fixture), and DescribeConfigs through the proxy shows it."""
    from kafka.admin import ConfigResource, ConfigResourceType

    direct = _admin(cluster.kafka)
    try:
        answer = direct.alter_configs([ConfigResource(ConfigResourceType.TOPIC, cluster.topic,
                                                      configs={"remote.storage.enable": "true"})])
        assert "Tiered Storage functionality is disabled in the broker" in answer["topic"][cluster.topic], answer
    finally:
        direct.close()
    configs = _configs_through_the_proxy(cluster)
    assert configs["remote.storage.enable"]["value"] == "true"
    assert configs["local.retention.bytes"]["value"] == str(SEGMENT_BYTES)


# -- clients through the proxy ---------------------------------------------------------------------

@pytest.mark.parametrize(("library", "mechanism", "target"), READS)
def test_clients_read_the_whole_history_with_their_own_credentials(cluster: Cluster, library: str, mechanism: str,
                                                                    target: str) -> None:
    """Through ``plain`` (broker-first) the start comes from the remote tier after the broker's
    OFFSET_OUT_OF_RANGE; through ``tls`` (remote-preferred) from the remote tier directly."""
    before = _remote_bytes(cluster.targets[target], cluster.topic)
    got = READERS[library](_login(cluster, target, "alice", mechanism), cluster.topic, cluster.ends)
    for p, end in cluster.ends.items():
        assert got[p][:end] == list(range(end)), f"{library} partition {p}: {len(got[p])} of {end}"
    assert _remote_bytes(cluster.targets[target], cluster.topic) > before  # the start came from the remote tier


def _refusal(library: str, login: Login) -> str:
    """How ``library`` reports a refused login, with the address and timings taken out."""
    if library == "confluent":
        from confluent_kafka import Consumer, KafkaError

        errors: list[Any] = []
        consumer = Consumer({**_confluent_config(login), "error_cb": errors.append})
        try:
            deadline = time.monotonic() + 20
            while not any(e.code() == KafkaError._AUTHENTICATION for e in errors) and time.monotonic() < deadline:
                consumer.poll(0.2)
        finally:
            consumer.close()
        refused = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
        assert refused, errors
        text = f"{refused[0].name()}: {refused[0].str()}"
    else:
        try:
            READERS[library](login, "any-topic", {0: 1}, timeout=2)
        except Exception as e:  # noqa: BLE001 - each library names the refusal its own way
            text = f"{type(e).__name__}: {e}"
        else:
            raise AssertionError(f"{library} logged in with a wrong password")
    port = login.bootstrap.rsplit(":", 1)[1]
    return re.sub(r"\(after \d+ms in state (\w+)\)", r"(in state \1)", text.replace(port, "PORT"))


@pytest.mark.parametrize("library", list(READERS))
def test_a_wrong_password_is_refused_through_the_proxy_as_directly(cluster: Cluster, library: str) -> None:
    """The broker refuses the login (its log says so for the attempt through the proxy too), and
    the client reports it exactly as it does directly: confluent-kafka its authentication error,
    kafka-python and aiokafka that they could not bootstrap."""
    login = _login(cluster, "plain", "alice", "SCRAM-SHA-512", password="not-alices-password")
    direct = _refusal(library, Login(cluster.kafka.bootstraps["SASL_PLAINTEXT"], "SASL_PLAINTEXT", login.user,
                                     login.password, login.mechanism, cluster.ca))
    mark = cluster.broker_log_size()
    through = _refusal(library, login)
    assert through == direct
    if library == "confluent":
        assert "Authentication failed during authentication due to invalid credentials with SASL mechanism " \
               "SCRAM-SHA-512" in through
    logged = [line for line in cluster.broker_log_since(mark).splitlines() if FAILED_AUTHENTICATION in line]
    assert logged and all("invalid credentials with SASL mechanism SCRAM-SHA-512" in line for line in logged), logged


@pytest.mark.parametrize("target", ["plain", "tls"])
def test_a_refused_principal_gets_kafkas_refusal_and_not_one_remote_byte(cluster: Cluster, target: str) -> None:
    """mallory logs in but has no ACL on the topic. Client libraries do not even fetch a partition
    whose metadata was refused, so the requests are sent as mallory by our own client, for offsets
    only the remote tier holds: Metadata, Fetch and ListOffsets get Kafka's
    TOPIC_AUTHORIZATION_FAILED, no records, and Kafka's authorizer logs each denial."""
    from protocol.errors import ErrorCode

    t = cluster.targets[target]
    before = _remote_bytes(t, cluster.topic)
    mark = cluster.broker_log_size()
    mallory = BrokerClient(t.bootstrap, security=cluster.security("mallory", t.protocol, "SCRAM-SHA-256"))
    try:
        mallory.metadata([cluster.topic])
        assert mallory.topic_errors == {cluster.topic: ErrorCode.TOPIC_AUTHORIZATION_FAILED}
        for p in range(PARTITIONS):
            assert 0 < cluster.log_starts[p]  # offset 0 is only in the remote tier
            answer = mallory.fetch(NODE, cluster.topic, p, 0, max_bytes=1 << 20)
            assert (answer.error_code, bytes(answer.records)) == (ErrorCode.TOPIC_AUTHORIZATION_FAILED, b"")
            assert mallory.list_offset(NODE, cluster.topic, p, EARLIEST)[0] == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    finally:
        mallory.close()
    denied = re.findall(r"Principal = User:mallory is Denied operation = (\w+) .* on resource = "
                        rf"Topic:LITERAL:{re.escape(cluster.topic)} for request = (\w+)", cluster.broker_log_since(mark))
    assert {("READ", "Fetch"), ("DESCRIBE", "ListOffsets"), ("DESCRIBE", "Metadata")} <= set(denied), denied
    assert _remote_bytes(t, cluster.topic) == before


def test_a_refused_principal_sees_topic_authorization_failed_in_a_client_library(cluster: Cluster) -> None:
    """librdkafka subscribed as mallory (who may use the group) reports Kafka's refusal of the topic
    and reads nothing. (By assignment it reports nothing: it just never fetches a refused partition.)"""
    from confluent_kafka import Consumer, KafkaError

    consumer = Consumer({**_confluent_config(_login(cluster, "tls", "mallory", "SCRAM-SHA-512")),
                         "auto.offset.reset": "earliest"})
    refused, read = [], 0
    try:
        consumer.subscribe([cluster.topic])
        deadline = time.monotonic() + 20
        while not refused and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is None:
                read += 1
            elif message.error().code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                refused.append(message.error())
    finally:
        consumer.close()
    assert refused and read == 0, refused


def test_a_refused_principal_cannot_change_tiering(cluster: Cluster) -> None:
    """The proxy records a tiering key only where Kafka accepted the request: mallory's change of
    local.retention.bytes is refused by Kafka's authorizer and changes nothing."""
    from kafka.admin import ConfigResource, ConfigResourceType
    from kafka.errors import TopicAuthorizationFailedError

    admin = _admin(cluster.kafka, cluster.targets["plain"].bootstrap, user="mallory")
    try:
        # raise_on_unknown=False: kafka-python would first check the keys with a DescribeConfigs, refused too.
        answer = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, cluster.topic,
                                                     configs={"local.retention.bytes": "1"})], raise_on_unknown=False)
    finally:
        admin.close()
    assert TopicAuthorizationFailedError.__name__ in str(answer["topic"][cluster.topic]), answer
    assert _configs_through_the_proxy(cluster)["local.retention.bytes"]["value"] == str(SEGMENT_BYTES)


def _configs_through_the_proxy(cluster: Cluster) -> dict:
    """The tiered topic's configs, every one, as the admin user reads them through the proxy."""
    from kafka.admin import ConfigResource, ConfigResourceType

    admin = _admin(cluster.kafka, cluster.targets["plain"].bootstrap)
    try:
        return admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, cluster.topic)],
                                      config_filter="all")["topic"][cluster.topic]
    finally:
        admin.close()


# -- our tools with their own credentials ------------------------------------------------------------

def _command_config(cluster: Cluster, user: str, protocol: str = "SASL_PLAINTEXT") -> Path:
    path = cluster.work / f"{user}-{protocol}.properties"
    tls = f"ssl.truststore.location={cluster.ca}\n" if protocol == "SASL_SSL" else ""
    path.write_text(f"security.protocol={protocol}\nsasl.mechanism=SCRAM-SHA-256\n{tls}"
                    f'sasl.jaas.config={SCRAM_MODULE} required username="{user}" password="{cluster.password(user)}";\n')
    return path


def test_describe_and_segments_take_a_command_config(cluster: Cluster) -> None:
    """``describe`` reads the remote tier's sizes from DescribeLogDirs through the proxy, which Kafka
    answers only to a principal with Describe on the cluster: the proxy's principal (the operator's
    view here) gets every partition, alice the broker's CLUSTER_AUTHORIZATION_FAILED and no sizes."""
    cli = [sys.executable, "-m", "proxy.cli"]
    for target in ("plain", "tls"):
        t = cluster.targets[target]
        described = subprocess.run([*cli, "describe", "--bootstrap-servers", t.bootstrap, "--topic", cluster.topic,
                                    "--command-config", str(_command_config(cluster, PROXY_USER, t.protocol))],
                                   capture_output=True, text=True, timeout=60)
        assert described.returncode == 0, described.stderr
        assert len([line for line in described.stdout.splitlines() if line.startswith(cluster.topic)]) == PARTITIONS
    refused = subprocess.run([*cli, "describe", "--bootstrap-servers", cluster.targets["plain"].bootstrap,
                              "--topic", cluster.topic, "--command-config", str(_command_config(cluster, "alice"))],
                             capture_output=True, text=True, timeout=60)
    assert (refused.returncode, refused.stdout) == (1, ""), refused
    assert refused.stderr == "tiered-proxy: DescribeLogDirs: CLUSTER_AUTHORIZATION_FAILED\n"
    segments = subprocess.run([*cli, "segments", "--metadata", f"topic://{METADATA_TOPIC}", "--bootstrap-servers",
                               cluster.kafka.bootstraps["SASL_PLAINTEXT"], "--topic", cluster.topic,
                               "--command-config", str(_command_config(cluster, "alice"))],
                              capture_output=True, text=True, timeout=60)
    assert segments.returncode == 0, segments.stderr
    assert "COPY_SEGMENT_FINISHED" in segments.stdout
    # A read-only view asks for no producer id (alice may not write): nothing refused on the way.
    assert "Authorization" not in segments.stderr, segments.stderr
    unauthenticated = subprocess.run([*cli, "describe", "--bootstrap-servers", cluster.targets["plain"].bootstrap],
                                     capture_output=True, text=True, timeout=90)
    assert unauthenticated.returncode == 1 and unauthenticated.stderr.count("\n") == 1, unauthenticated.stderr
    assert "then closed the connection on Metadata (if the cluster requires SASL: this client has no SASL " \
           "settings)" in unauthenticated.stderr
    assert unauthenticated.stderr.endswith("with --command-config\n")


def _spark_options(cluster: Cluster, user: str) -> dict[str, Any]:
    return {"kafka.bootstrap.servers": cluster.targets["plain"].bootstrap, "subscribe": cluster.topic,
            "remote.log.storage.uri": f"file://{cluster.work}/remote",
            "remote.log.metadata.uri": f"topic://{METADATA_TOPIC}",
            "kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.jaas.config": f'{SCRAM_MODULE} required username="{user}" password="{cluster.password(user)}";'}


def test_the_spark_source_plans_only_what_the_jobs_principal_may_read(cluster: Cluster) -> None:
    from tiering.spark.splits import RemoteSplit, TailSplit, TieredKafkaBatchReader, TopicAuthorizationError

    splits = TieredKafkaBatchReader(_spark_options(cluster, "alice")).partitions()
    assert any(isinstance(s, RemoteSplit) for s in splits) and all(isinstance(s, RemoteSplit | TailSplit) for s in splits)
    with pytest.raises(TopicAuthorizationError, match=rf"not authorized to read topic {cluster.topic}"):
        TieredKafkaBatchReader(_spark_options(cluster, "mallory") | {"assign": f'{{"{cluster.topic}": [0]}}',
                                                                     "subscribe": ""}).partitions()


# -- last: nothing secret in the proxies' DEBUG logs -----------------------------------------------

def test_zz_no_password_in_the_proxy_logs(cluster: Cluster) -> None:
    passwords = {**cluster.kafka.users, PROXY_USER: PROXY_PASSWORD}
    for target in cluster.targets.values():
        text = target.proxy.log_text()
        assert "DEBUG" in text and "[hidden]" in text  # kafka-python logged its configuration, redacted
        for user, password in passwords.items():
            assert password not in text, f"{user}'s password in {target.proxy.log_path}"


# -- KIP-368 re-authentication -------------------------------------------------------------------

def test_reauthentication_passes_through_and_our_own_client_renews_its_session(tmp_path: Path) -> None:
    """A cluster of its own whose SASL sessions last 3 s (connections.max.reauth.ms). librdkafka
    re-authenticates on the connection it has through the proxy, and our own client (here directly,
    and the proxy's metadata refresh) logs in anew before its session ends, so Kafka never
    disconnects an expired session: its Selector logs each re-authentication and its Processor
    each expired channel it closes (both at DEBUG, turned up for this test)."""
    from confluent_kafka import Consumer, TopicPartition
    from kafka.admin import ACLOperation, NewTopic, ResourcePattern, ResourceType

    kafka = start_secure(tmp_path / "kafka", properties={"connections.max.reauth.ms": 3000},
                         users={**SECURE_USERS, PROXY_USER: PROXY_PASSWORD})
    proxy = None
    try:
        topic = "reauth"
        admin = _admin(kafka)
        try:
            admin.create_topics([NewTopic(topic, 1, 1)])
            created = admin.create_acls(
                _allow("alice", ResourcePattern(ResourceType.TOPIC, topic), ACLOperation.READ, ACLOperation.DESCRIBE)
                + _allow("alice", ResourcePattern(ResourceType.GROUP, "*"), ACLOperation.READ)
                + _allow(PROXY_USER, ResourcePattern(ResourceType.TOPIC, topic), ACLOperation.DESCRIBE))
            assert not created["failed"], created
        finally:
            admin.close()
        _produce(kafka, topic, 500, 1)
        for logger in ("org.apache.kafka.common.network.Selector", "kafka.network.Processor"):
            _set_broker_logger(kafka, logger, "DEBUG")
        mark = kafka.log_path.stat().st_size
        proxy = start_proxy(kafka.bootstraps["SASL_PLAINTEXT"], tmp_path / "proxy",
                            "--set", "remote.log.storage.system.enable=false", "--set", "proxy.metadata.refresh.ms=500",
                            "--set", "upstream.security.protocol=SASL_PLAINTEXT",
                            "--set", "upstream.sasl.mechanism=SCRAM-SHA-512", "--set", f"upstream.sasl.username={PROXY_USER}",
                            "--set", f"upstream.sasl.password={PROXY_PASSWORD}", node_ids=[NODE])
        consumer = Consumer(_confluent_config(Login(proxy.bootstrap, "SASL_PLAINTEXT", "alice", kafka.users["alice"],
                                                    "SCRAM-SHA-512", str(kafka.certs.ca))))
        ours = _direct(kafka, "alice", "SCRAM-SHA-256")
        ports: set[int] = set()  # our client's connections, one login each
        try:
            consumer.assign([TopicPartition(topic, 0, 0)])
            read = 0
            deadline = time.monotonic() + 8  # more than two session lifetimes
            while time.monotonic() < deadline:
                message = consumer.poll(0.5)
                read += message is not None and message.error() is None
                assert topic in ours.metadata([topic])  # our client keeps using its connection
                ports |= {c.sock.getsockname()[1] for c in ours._connections.values()}
            assert read == 500  # the whole topic, and the connection stayed usable
            assert len(ports) >= 3  # our client logged in anew, before each 3 s session ended
        finally:
            consumer.close()
            ours.close()
        with open(kafka.log_path, "rb") as log:
            log.seek(mark)
            text = log.read().decode(errors="replace")
        assert "Successfully re-authenticated with /127.0.0.1" in text
        assert "Disconnecting expired channel" not in text
        assert FAILED_AUTHENTICATION not in text
    finally:
        if proxy is not None:
            proxy.stop()
        kafka.stop()
