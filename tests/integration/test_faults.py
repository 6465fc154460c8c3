"""Faults around a tiering proxy on noida-db with an S3 remote tier (SeaweedFS behind a fault-injecting
relay): S3 answering 500s while the copier works, S3 slow (seconds per request) during a backfill,
and the broker restarted in the middle of copying. In every case nothing is lost or duplicated
(consumers through the proxy read every record exactly once, remote segments stay contiguous)
and tail traffic does not wait for the remote tier."""

from __future__ import annotations

import time
import urllib.request

import pytest

from proxy.embedded_broker import start_broker
from tests.clients import consume_records
from tests.delivery import CheckedProducer
from tests.integration.faulty_http import FaultyRelay
from tests.integration.s3_server import DUMMY_CREDENTIALS, REGION, new_bucket
from tests.proxy_process import free_port, start_proxy
from tests.tiering_checks import (
    create_tiered_topic,
    message_number,
    partitions_of,
    produce_numbered,
    wait_until,
)
from tiering.broker_client import EARLIEST, BrokerClient
from tiering.metadata.view import load_metadata

PARTITIONS = 2


@pytest.fixture(scope="module")
def faulty(tmp_path_factory, seaweedfs):
    work = tmp_path_factory.mktemp("faults")
    broker = start_broker("noida", work / "broker")
    server = seaweedfs.gateway()
    relay = FaultyRelay(server.endpoint)
    bucket = new_bucket(server.endpoint)
    metrics_port = free_port()
    args = ("--data-dir", str(work / "data"),
            "--remote", f"s3://{bucket}/tiered?endpoint_url={relay.endpoint}&region={REGION}",
            "--set", f"remote.log.storage.s3.access.key.id={DUMMY_CREDENTIALS['aws_access_key_id']}",
            "--set", f"remote.log.storage.s3.secret.access.key={DUMMY_CREDENTIALS['aws_secret_access_key']}",
            "--set", "remote.log.manager.task.interval.ms=100", "--set", "proxy.copier.backoff.max.ms=1000",
            "--set", "remote.log.chunk.cache.size.bytes=1048576", "--set", "remote.log.chunk.size.bytes=65536",
            "--set", f"proxy.metrics.listen=127.0.0.1:{metrics_port}")
    proxy = start_proxy(broker.bootstrap, work / "proxy", *args)
    state = {"broker": broker, "proxy": proxy, "relay": relay, "work": work, "args": args,
             "metrics": f"http://127.0.0.1:{metrics_port}/metrics"}
    yield state
    state["proxy"].stop()
    state["broker"].stop()
    relay.close()
    server.stop()


def _produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    produce_numbered(bootstrap, topic, start, count, PARTITIONS)


def _exactly_once(bootstrap: str, topic: str, total: int) -> None:
    got = consume_records("confluent", bootstrap, topic, PARTITIONS, total, timeout=120)
    for p in range(PARTITIONS):
        values = [message_number(r.value) for r in got[p]]
        assert values == list(range(p, total, PARTITIONS)), p
        assert [r.offset for r in got[p]] == list(range(len(values)))


def _metric(url: str, name: str) -> float:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def _remote(work):  # noqa: ANN001, ANN202 - the proxy's metadata, read without writing to it
    return load_metadata(f"file://{work / 'data' / 'metadata'}")


def _contiguous(work, tps) -> None:  # noqa: ANN001
    state = _remote(work)
    for tp in tps:
        segments = state.finished(tp)
        assert segments and segments[0].start_offset == 0, tp
        assert all(a.end_offset + 1 == b.start_offset for a, b in zip(segments, segments[1:], strict=False)), tp


def test_s3_errors_while_copying_are_retried_and_caught_up(faulty, unique_name):
    broker, proxy, relay = faulty["broker"], faulty["proxy"], faulty["relay"]
    topic = f"errors-{unique_name}"
    create_tiered_topic(broker.bootstrap, topic, PARTITIONS, **{"segment.bytes": str(64 * 1024),
                                                           "local.retention.bytes": str(128 * 1024)})
    relay.mode = "error"
    _produce(broker.bootstrap, topic, 0, 20_000)
    assert wait_until(lambda: _metric(faulty["metrics"], "kafka_server_brokertopicmetrics_remotecopyerrorspersec_total"
                                      + "{topic=\"" + topic + "\"}") >= 2, 60)
    client = BrokerClient(broker.bootstrap)
    assert all(client.list_offset(1, topic, p, EARLIEST)[1] == 0 for p in range(PARTITIONS))  # nothing trimmed
    relay.mode = "pass"
    assert wait_until(lambda: all(client.list_offset(1, topic, p, EARLIEST)[1] > 0 for p in range(PARTITIONS)), 90)
    _exactly_once(proxy.bootstrap, topic, 20_000)
    _contiguous(faulty["work"], partitions_of(client, topic))


def test_a_throttling_store_slows_the_proxy_down_and_loses_nothing(faulty, unique_name):
    """The store answers SlowDown above 15 requests a second while the proxy tiers a topic and a
    consumer reads it back from offset 0 (64 KiB chunks: many GETs): both finish, exactly once,
    the proxy's requests settle at the rate the store allows, and its metrics show the throttling."""
    broker, proxy, relay = faulty["broker"], faulty["proxy"], faulty["relay"]
    topic = f"throttled-{unique_name}"
    create_tiered_topic(broker.bootstrap, topic, PARTITIONS, **{"segment.bytes": str(64 * 1024),
                                                           "local.retention.bytes": str(128 * 1024)})
    failures = "tiered_proxy_remote_storage_request_failures_total"
    failed_before = _metric(faulty["metrics"], failures)
    relay.max_requests_per_s = 15
    try:
        began = time.monotonic()
        _produce(broker.bootstrap, topic, 0, 12_000)
        client = BrokerClient(broker.bootstrap)
        assert wait_until(lambda: all(client.list_offset(1, topic, p, EARLIEST)[1] > 1000
                                      for p in range(PARTITIONS)), 180)
        _exactly_once(proxy.bootstrap, topic, 12_000)
        rate, throttled = relay.rate_since(began + (time.monotonic() - began) / 2)  # the second half
    finally:
        relay.max_requests_per_s = None
    assert rate <= 15 * 1.3 and throttled <= 0.15, (rate, throttled)
    assert _metric(faulty["metrics"], failures) > failed_before
    _contiguous(faulty["work"], partitions_of(client, topic))


def test_slow_s3_delays_backfill_not_the_tail(faulty, unique_name):
    broker, proxy, relay = faulty["broker"], faulty["proxy"], faulty["relay"]
    topic, tail = f"slow-{unique_name}", f"tail-{unique_name}"
    create_tiered_topic(broker.bootstrap, topic, PARTITIONS, **{"segment.bytes": str(64 * 1024),
                                                           "local.retention.bytes": str(128 * 1024)})
    _produce(broker.bootstrap, topic, 0, 20_000)
    client = BrokerClient(broker.bootstrap)
    assert wait_until(lambda: all(client.list_offset(1, topic, p, EARLIEST)[1] > 2000 for p in range(PARTITIONS)), 90)
    relay.mode, relay.delay_s = "slow", 2.0
    import threading

    done = threading.Event()
    outcome: list[BaseException] = []

    def backfill() -> None:
        try:
            _exactly_once(proxy.bootstrap, topic, 20_000)
        except BaseException as e:  # noqa: BLE001 - reported by the test thread
            outcome.append(e)
        finally:
            done.set()

    reader = threading.Thread(target=backfill, daemon=True)
    reader.start()
    # Meanwhile the tail: produce and read back through the proxy, each round trip quick.
    from confluent_kafka import Consumer, TopicPartition

    producer = CheckedProducer({"bootstrap.servers": proxy.bootstrap, "linger.ms": 0})
    consumer = Consumer({"bootstrap.servers": proxy.bootstrap, "group.id": f"tail-{unique_name}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([TopicPartition(tail, 0, 0)])
    slowest = 0.0
    try:
        for i in range(20):
            started = time.monotonic()
            producer.produce(tail, f"t{i}".encode(), partition=0)
            producer.deliver_all(10)
            got = None
            while got is None and time.monotonic() - started < 10:
                m = consumer.poll(0.2)
                if m is not None and m.error() is None:
                    got = m.value()
            assert got == f"t{i}".encode()
            slowest = max(slowest, time.monotonic() - started)
            time.sleep(0.1)
    finally:
        consumer.close()
    assert slowest < 1.5, f"a tail round trip took {slowest:.2f}s while S3 was slow"
    assert relay.faults > 0 and not done.is_set()  # the backfill was indeed waiting on S3
    relay.mode = "pass"
    assert done.wait(180)
    assert not outcome, outcome


def test_broker_restart_in_the_middle_of_copying(faulty, unique_name):
    broker, proxy = faulty["broker"], faulty["proxy"]
    topic = f"restart-{unique_name}"
    create_tiered_topic(broker.bootstrap, topic, PARTITIONS, **{"segment.bytes": str(64 * 1024)})
    _produce(broker.bootstrap, topic, 0, 30_000)
    tps = partitions_of(BrokerClient(broker.bootstrap), topic)
    assert wait_until(lambda: f"tiered {topic}-" in proxy.log_text(), 60)  # copying has begun
    broker.stop()
    time.sleep(2)
    faulty["broker"] = broker = start_broker("noida", broker.data_dir, port=broker.port)
    _produce(broker.bootstrap, topic, 30_000, 10_000)
    client = BrokerClient(broker.bootstrap)

    def caught_up() -> bool:
        ends = {tp: client.fetch(1, topic, tp.partition, 0, max_bytes=1).last_stable_offset for tp in tps}
        state = _remote(faulty["work"])
        return all(state.finished(tp) and state.finished(tp)[-1].end_offset + 1 >= ends[tp] - 200 for tp in tps)

    assert wait_until(caught_up, 120)
    _contiguous(faulty["work"], tps)
    _exactly_once(proxy.bootstrap, topic, 40_000)
